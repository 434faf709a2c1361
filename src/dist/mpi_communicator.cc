// dist: the Communicator over MPI, for ranks in processes on one host or many. Calls come from
// one thread at a time, not always the main one (MPI_THREAD_SERIALIZED). The all-reduce is a
// ring reduce-scatter over point-to-point messages and an all-gather, the same bits on every
// rank. With a timeout, each step runs in its non-blocking form and is polled until done or the
// deadline; what a request that was given up on may still write lands in buffers this file
// owns, never in the caller's.
#ifdef QS_HAVE_MPI

// Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++ bindings, which need a
// library of their own; only the C API is used.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "core/dtype.h"
#include "core/log.h"
#include "dist/mpi_communicator.h"

namespace qs::dist {
namespace {

using Clock = std::chrono::steady_clock;

// How a wait polls MPI_Test. MPI moves a message only while a rank is inside an MPI call (no
// progress thread), so a collective keeps testing: it spins, then yields the core between
// tests to any thread that wants it (on a machine with more ranks than cores). An idle worker
// waiting for the next step sleeps between tests instead, with a pause that doubles up to
// max_sleep_s: it waits for a small message, and 1 ms wake-ups cost nothing beside a step.
struct PollPolicy {
  double spin_s;
  double max_sleep_s;  // 0: yield, never sleep
};
constexpr PollPolicy kCollectivePoll{2e-3, 0};
constexpr PollPolicy kIdlePoll{200e-6, 1e-3};

// wait_broadcast() sleeps only for a message this small (Open MPI's shared-memory eager size,
// which arrives whole); a larger payload follows a token, as an ordinary broadcast, so that it
// moves at full speed.
constexpr size_t kIdleWaitBytes = 4096;

// MPI counts are ints; a broadcast goes in pieces no larger than this.
constexpr size_t kMaxPieceBytes = size_t{1} << 30;

// MPI_Finalize waits for every rank; one that has not come after this long failed without
// abort_job() or hangs.
constexpr std::chrono::seconds kFinalizeLimit{60};

// The all-reduce's ring messages, apart from every collective's traffic (MPI matches
// point-to-point and collective messages separately).
constexpr int kRingTag = 0x5153;

// The buffers a collective stages through: padding to a multiple of the size, the bf16
// conversion, and, whenever a deadline may abandon a request, every buffer MPI writes into.
// Reused from call to call.
struct Scratch {
  std::vector<float> work_f32, recv_f32;
  std::vector<uint16_t> gather_bf16;
  std::vector<uint8_t> bytes;
  std::vector<int> ints;
};

// Process-wide state, never destroyed: the exit handler reads it after static destructors ran.
// A broken world decides how the process finalizes.
struct MpiProcess {
  std::mutex mu;
  std::shared_ptr<Communicator> world;
  Status init_error;  // MPI_Init_thread's, returned again by every later world()
  std::atomic<bool> world_broken{false};
  // The scratch of communicators destroyed while a request they gave up on was still pending:
  // MPI may write into it until it finalizes, so it is kept (at most one per broken
  // communicator).
  std::vector<std::unique_ptr<Scratch>> abandoned;
};

MpiProcess& mpi_process() {
  static MpiProcess* process = new MpiProcess();
  return *process;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// "Open MPI v4.1.4, package: Debian OpenMPI, ..." -> "Open MPI 4.1.4"; another library's first
// line.
std::string mpi_library_name() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown library";
  std::string name(text, static_cast<size_t>(len));
  const size_t end = name.find_first_of(",\n");
  if (end != std::string::npos) name.resize(end);
  std::replace(name.begin(), name.end(), '\t', ' ');
  const size_t v = name.find(" v");
  if (v != std::string::npos && v + 2 < name.size() && name[v + 2] >= '0' && name[v + 2] <= '9') {
    name.erase(v + 1, 1);
  }
  while (!name.empty() && name.back() == ' ') name.pop_back();
  return name;
}

void finalize_mpi_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (mpi_process().world_broken.load()) {
    // MPI_Finalize would wait for ranks that died or hang. Leaving without it, this rank's exit
    // makes mpirun end the job and report it: the failure is not hidden.
    QS_LOG_WARN("the MPI world communicator broke: leaving without MPI_Finalize");
    return;
  }
  // A rank that exits with an error but without abort_job() leaves its peers waiting in their
  // next collective, and this rank waiting for them here: exit non-zero instead, which makes
  // mpirun end the job.
  std::thread([] {
    std::this_thread::sleep_for(kFinalizeLimit);
    QS_LOG_ERROR("MPI_Finalize still waiting for the other ranks after %lld s: exiting",
                 static_cast<long long>(kFinalizeLimit.count()));
    std::_Exit(EXIT_FAILURE);
  }).detach();
  MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  // Owns comm (freed at destruction). hosts: the host name of each rank, in rank order.
  MpiCommunicator(MPI_Comm comm, std::vector<std::string> hosts, std::string library, bool is_world)
      : comm_(comm),
        hosts_(std::move(hosts)),
        library_(std::move(library)),
        is_world_(is_world),
        scratch_(std::make_unique<Scratch>()) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (pending_[0] != MPI_REQUEST_NULL || pending_[1] != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Testall(2, pending_, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !done) {
        MpiProcess& process = mpi_process();
        std::lock_guard<std::mutex> lock(process.mu);
        process.abandoned.push_back(std::move(scratch_));
      }
    }
    // Allowed with a request pending: MPI frees the communicator once it completes.
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string describe() const override {
    const size_t n_hosts = std::set<std::string>(hosts_.begin(), hosts_.end()).size();
    return "MPI (" + library_ + "), " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") +
           " on " + std::to_string(n_hosts) + (n_hosts == 1 ? " host" : " hosts");
  }

  Status all_reduce_sum(float* data, int64_t n) override {
    const Timed timer(this, static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(float));
    return all_reduce(data, nullptr, n, "all_reduce_sum");
  }
  Status all_reduce_sum_bf16(uint16_t* data, int64_t n) override {
    const Timed timer(this, static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(uint16_t));
    return all_reduce(nullptr, data, n, "all_reduce_sum_bf16");
  }

  Status all_gather(const void* send, size_t bytes, void* recv) override {
    const Timed timer(this, bytes);
    QS_RETURN_IF_ERROR(broken_);
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return invalid_argument("all_gather: " + std::to_string(bytes) +
                              " bytes per rank, more than MPI's count of " +
                              std::to_string(INT_MAX));
    }
    if (bytes == 0) return ok_status();
    const int count = static_cast<int>(bytes);
    std::vector<uint8_t>& stage = scratch_->bytes;
    stage.resize(bytes * static_cast<size_t>(size_ + 1));
    std::memcpy(stage.data(), send, bytes);
    QS_RETURN_IF_ERROR(
        await_started(MPI_Iallgather(stage.data(), count, MPI_BYTE, stage.data() + bytes, count,
                                     MPI_BYTE, comm_, &pending_[0]),
                      "all_gather", timeout_s_, kCollectivePoll));
    std::memcpy(recv, stage.data() + bytes, bytes * static_cast<size_t>(size_));
    return ok_status();
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    const Timed timer(this, bytes);
    return bcast(data, bytes, root, timeout_s_, kCollectivePoll, "broadcast");
  }

  Status wait_broadcast(void* data, size_t bytes, int root, double timeout_s) override {
    if (bytes <= kIdleWaitBytes) {
      return bcast(data, bytes, root, timeout_s, kIdlePoll, "wait_broadcast");
    }
    uint8_t token = 1;
    QS_RETURN_IF_ERROR(bcast(&token, 1, root, timeout_s, kIdlePoll, "wait_broadcast"));
    return broadcast(data, bytes, root);
  }

  Status barrier() override {
    QS_RETURN_IF_ERROR(broken_);
    return await_started(MPI_Ibarrier(comm_, &pending_[0]), "barrier", timeout_s_, kCollectivePoll);
  }

  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    QS_RETURN_IF_ERROR(broken_);
    if (color < 0) return invalid_argument("split: color " + std::to_string(color) + " < 0");
    // Every rank's (color, key), gathered under the timeout: once it is in, every rank has
    // reached split, so MPI_Comm_split (which has no non-blocking form) does not wait on a
    // missing one. The new communicator's ranks and their hosts follow from it here.
    std::vector<int>& ck = scratch_->ints;
    ck.assign(2 * static_cast<size_t>(size_ + 1), 0);
    ck[0] = color;
    ck[1] = key;
    QS_RETURN_IF_ERROR(await_started(
        MPI_Iallgather(ck.data(), 2, MPI_INT, ck.data() + 2, 2, MPI_INT, comm_, &pending_[0]),
        "split", timeout_s_, kCollectivePoll));
    std::vector<std::pair<int, int>> members;  // (key, rank here) of the ranks of my color
    for (int r = 0; r < size_; ++r) {
      if (ck[2 + 2 * r] == color) members.emplace_back(ck[3 + 2 * r], r);
    }
    std::sort(members.begin(), members.end());
    std::vector<std::string> hosts;
    for (const auto& m : members) hosts.push_back(hosts_[static_cast<size_t>(m.second)]);

    MPI_Comm sub = MPI_COMM_NULL;
    QS_RETURN_IF_ERROR(check(MPI_Comm_split(comm_, color, key, &sub), "split"));
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    auto out = std::make_unique<MpiCommunicator>(sub, std::move(hosts), library_, false);
    out->set_timeout(timeout_s_);
    return std::unique_ptr<Communicator>(std::move(out));
  }

  Status health() const override {
    std::lock_guard<std::mutex> lock(health_mu_);
    return broken_;
  }

 private:
  bool timed() const { return timeout_s_ > 0; }

  // Adds one collective's bytes and time to stats() when it returns.
  class Timed {
   public:
    Timed(MpiCommunicator* c, size_t bytes) : c_(c), bytes_(bytes), start_(Clock::now()) {}
    ~Timed() { c_->record(bytes_, std::chrono::duration<double>(Clock::now() - start_).count()); }
    Timed(const Timed&) = delete;
    Timed& operator=(const Timed&) = delete;

   private:
    MpiCommunicator* c_;
    size_t bytes_;
    Clock::time_point start_;
  };

  // Marks this communicator broken with `status`, which every later call returns.
  Status fail(Status status) {
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      broken_ = status;
    }
    if (is_world_) mpi_process().world_broken.store(true);
    return status;
  }

  std::string where() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

  Status check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return ok_status();
    return fail(unavailable(std::string(what) + ": " + where() + ": " + mpi_error_text(rc)));
  }

  // Waits for the requests in pending_: polls until they complete, `limit_s` after `start`
  // passes (0: no limit), or MPI reports an error. At the deadline they stay in pending_, and
  // the communicator is broken, so nothing reuses the scratch they may still write into.
  Status await(const char* what, Clock::time_point start, double limit_s, const PollPolicy& poll) {
    std::chrono::duration<double> pause(20e-6);
    const std::chrono::duration<double> max_pause(poll.max_sleep_s);
    for (;;) {
      int done = 0;
      const int rc = MPI_Testall(2, pending_, &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return check(rc, what);
      if (done) return ok_status();
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (limit_s > 0 && elapsed >= limit_s) {
        char limit[32];
        std::snprintf(limit, sizeof(limit), "%g", limit_s);
        return fail(unavailable(std::string(what) + ": " + where() +
                                ": no answer from the other ranks within " + limit +
                                " s (a rank died or hangs)"));
      }
      if (elapsed < poll.spin_s) continue;
      if (poll.max_sleep_s > 0) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, max_pause);
      } else {
        std::this_thread::yield();
      }
    }
  }

  // The non-blocking collective just started in pending_[0] (`start_rc`: what starting it
  // returned), awaited for at most `limit_s` from now.
  Status await_started(int start_rc, const char* what, double limit_s, const PollPolicy& poll) {
    QS_RETURN_IF_ERROR(check(start_rc, what));
    return await(what, Clock::now(), limit_s, poll);
  }

  // The elements each rank owns in the reduce-scatter: n rounded up to a multiple of the size.
  Result<int> chunk_count(int64_t n, const char* what) const {
    const int64_t chunk = (n + size_ - 1) / size_;
    if (chunk > INT_MAX) {
      return invalid_argument(std::string(what) + ": " + std::to_string(n) +
                              " elements, more than MPI's count of " + std::to_string(INT_MAX) +
                              " per rank");
    }
    return static_cast<int>(chunk);
  }

  // Sum, then copy: a reduce-scatter sums each element once, on the rank that owns its chunk,
  // and the all-gather sends that one sum to every rank, so every rank holds the same bits
  // (MPI_Allreduce promises no such thing). Exactly one of f32 and bf16 is set; bf16 is summed
  // in f32 and rounded once, by the owner, before the all-gather (which then moves half the
  // bytes).
  Status all_reduce(float* f32, uint16_t* bf16, int64_t n, const char* what) {
    QS_RETURN_IF_ERROR(broken_);
    if (n < 0) return invalid_argument(std::string(what) + ": count " + std::to_string(n) + " < 0");
    if (n == 0 || size_ == 1) return ok_status();
    const Clock::time_point start = Clock::now();
    QS_ASSIGN_OR_RETURN(const int chunk, chunk_count(n, what));
    const size_t padded = static_cast<size_t>(chunk) * static_cast<size_t>(size_);
    const size_t count = static_cast<size_t>(n);
    const size_t mine = static_cast<size_t>(chunk) * static_cast<size_t>(rank_);
    Scratch& s = *scratch_;
    // The caller's buffer is summed in place only where nothing is padded and no request can
    // be abandoned.
    const bool direct = !timed() && padded == count;

    float* work = f32;
    if (bf16 != nullptr || !direct) {
      s.work_f32.resize(padded);
      if (bf16 != nullptr) {
        for (size_t i = 0; i < count; ++i) s.work_f32[i] = bf16_to_f32(bf16[i]);
      } else {
        std::memcpy(s.work_f32.data(), f32, count * sizeof(float));
      }
      std::fill(s.work_f32.begin() + static_cast<ptrdiff_t>(count), s.work_f32.end(), 0.0f);
      work = s.work_f32.data();
    }
    QS_RETURN_IF_ERROR(ring_reduce_scatter(work, chunk, what, start));

    if (bf16 == nullptr) {
      QS_RETURN_IF_ERROR(all_gather_in_place(work, chunk, MPI_FLOAT, what, start));
      if (work != f32) std::memcpy(f32, work, count * sizeof(float));
      return ok_status();
    }
    uint16_t* gather = bf16;
    if (!direct) {
      s.gather_bf16.resize(padded);
      gather = s.gather_bf16.data();
    }
    for (size_t i = 0; i < static_cast<size_t>(chunk); ++i) {
      gather[mine + i] = f32_to_bf16(work[mine + i]);
    }
    QS_RETURN_IF_ERROR(all_gather_in_place(gather, chunk, MPI_UINT16_T, what, start));
    if (gather != bf16) std::memcpy(bf16, gather, count * sizeof(uint16_t));
    return ok_status();
  }

  // The reduce-scatter as a ring over point-to-point messages: in step k, rank r sends chunk
  // r - k - 1 to rank r + 1 and adds what rank r - 1 sends (chunk r - k - 2) into its own, so
  // after size - 1 steps work[rank * chunk ..) holds the full sum of its chunk. Open MPI's
  // MPI_Reduce_scatter_block (4.1) reduces to one rank and scatters: 3 to 10 times slower
  // from 256 KiB up on 2 ranks (bench/dist_allreduce_bench.cc).
  Status ring_reduce_scatter(float* work, int chunk, const char* what, Clock::time_point start) {
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    scratch_->recv_f32.resize(static_cast<size_t>(chunk));
    float* in = scratch_->recv_f32.data();
    auto at = [&](int c) { return work + static_cast<size_t>(c) * static_cast<size_t>(chunk); };
    for (int step = 0; step < size_ - 1; ++step) {
      const int send_chunk = (rank_ - step - 1 + 2 * size_) % size_;
      const int recv_chunk = (rank_ - step - 2 + 2 * size_) % size_;
      QS_RETURN_IF_ERROR(
          check(MPI_Irecv(in, chunk, MPI_FLOAT, prev, kRingTag, comm_, &pending_[0]), what));
      QS_RETURN_IF_ERROR(check(
          MPI_Isend(at(send_chunk), chunk, MPI_FLOAT, next, kRingTag, comm_, &pending_[1]), what));
      if (timed()) {
        QS_RETURN_IF_ERROR(await(what, start, timeout_s_, kCollectivePoll));
      } else {
        QS_RETURN_IF_ERROR(check(MPI_Waitall(2, pending_, MPI_STATUSES_IGNORE), what));
      }
      float* sum = at(recv_chunk);
      for (int i = 0; i < chunk; ++i) sum[i] += in[i];
    }
    return ok_status();
  }

  // buffer[rank * chunk ..) to every rank's buffer at the same place.
  Status all_gather_in_place(void* buffer, int chunk, MPI_Datatype type, const char* what,
                             Clock::time_point start) {
    QS_RETURN_IF_ERROR(check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, chunk, type,
                                            comm_, &pending_[0]),
                             what));
    return await(what, start, timeout_s_, kCollectivePoll);
  }

  // Broadcast in pieces MPI's int count can hold, polling the request with `poll`'s sleeps;
  // with a limit, staged through scratch.
  //
  // Every collective here is MPI's non-blocking form, awaited, also without a limit: MPI never
  // matches a blocking collective with a non-blocking one, and the ranks of one collective may
  // differ in their limits (a worker's idle wait_broadcast meets rank 0's broadcast).
  Status bcast(void* data, size_t bytes, int root, double limit_s, const PollPolicy& poll,
               const char* what) {
    QS_RETURN_IF_ERROR(broken_);
    if (root < 0 || root >= size_) {
      return invalid_argument(std::string(what) + ": root " + std::to_string(root) +
                              " outside a communicator of " + std::to_string(size_) + " ranks");
    }
    auto* base = static_cast<uint8_t*>(data);
    for (size_t offset = 0; offset < bytes; offset += kMaxPieceBytes) {
      const size_t piece = std::min(kMaxPieceBytes, bytes - offset);
      const int count = static_cast<int>(piece);
      uint8_t* at = base + offset;
      const bool stage = limit_s > 0;
      uint8_t* buffer = at;
      if (stage) {
        scratch_->bytes.resize(piece);
        buffer = scratch_->bytes.data();
        if (rank_ == root) std::memcpy(buffer, at, piece);
      }
      QS_RETURN_IF_ERROR(await_started(
          MPI_Ibcast(buffer, count, MPI_BYTE, root, comm_, &pending_[0]), what, limit_s, poll));
      if (stage && rank_ != root) std::memcpy(at, buffer, piece);
    }
    return ok_status();
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::string> hosts_;
  std::string library_;
  bool is_world_;
  // The requests in flight (a collective's, or a ring step's receive and send); after a
  // timeout, the ones given up on.
  MPI_Request pending_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::unique_ptr<Scratch> scratch_;
  // Written once, by the thread that makes the calls (which reads it unlocked); health() may be
  // asked from any thread (a server's /health).
  mutable std::mutex health_mu_;
  Status broken_;
};

}  // namespace

void mpi_abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

Result<std::shared_ptr<Communicator>> mpi_world() {
  MpiProcess& process = mpi_process();
  std::lock_guard<std::mutex> lock(process.mu);
  if (process.world) return process.world;
  QS_RETURN_IF_ERROR(process.init_error);

  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      process.init_error = unavailable("MPI_Init_thread: " + mpi_error_text(rc));
      return process.init_error;
    }
    // Finalized by whoever initialized: here, at exit (after the static destructors of objects
    // built later, which may free communicators).
    std::atexit(finalize_mpi_at_exit);
    if (provided < MPI_THREAD_SERIALIZED) {
      process.init_error = unimplemented(
          "this MPI library gives thread level " + std::to_string(provided) +
          "; quantserve calls MPI from its engine thread and needs MPI_THREAD_SERIALIZED");
      return process.init_error;
    }
  }
  // Errors become Status values instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) return unavailable("MPI_Comm_dup: " + mpi_error_text(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

  int size = 1;
  MPI_Comm_size(comm, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  rc = MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                     MPI_CHAR, comm);
  if (rc != MPI_SUCCESS) return unavailable("gathering host names: " + mpi_error_text(rc));
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const char* at = names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts.emplace_back(at, strnlen(at, MPI_MAX_PROCESSOR_NAME));
  }
  process.world =
      std::make_shared<MpiCommunicator>(comm, std::move(hosts), mpi_library_name(), true);
  return process.world;
}

}  // namespace qs::dist

#endif  // QS_HAVE_MPI
