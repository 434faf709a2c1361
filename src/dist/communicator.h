// dist: the collectives that tensor parallelism, CFG parallelism and data-parallel replicas
// need, behind one small interface (rank, size, all-reduce, all-gather, broadcast, barrier,
// split into groups). MPI implements it across processes and hosts (mpi_communicator.cc, built
// when CMake finds MPI); a single process is the size-1 implementation, so code that takes a
// Communicator runs unchanged without mpirun. A GPU backend can later implement it with NCCL.
//
// Every collective is called by every rank of the communicator in the same order, as in MPI.
// A collective that cannot finish (a rank died, or did not answer within timeout()) returns an
// error and leaves the communicator broken: every later call fails at once with the same error,
// so that one failure does not turn into a hang in the next collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single process", "MPI (Open MPI 4.1.4), 2 ranks on 2 hosts": for logs.
  virtual std::string describe() const = 0;

  // In place, data[0..n) = the sum over ranks. The result is the same, bit for bit, on every
  // rank (each element is summed once, in one order, and that sum is sent to all), which the
  // replicated decisions downstream (MoE routing, sampling) rely on. bf16 sums in f32 and rounds
  // once.
  virtual Status all_reduce_sum(float* data, int64_t n) = 0;
  virtual Status all_reduce_sum_bf16(uint16_t* data, int64_t n) = 0;
  // recv[r * bytes .. (r + 1) * bytes) = rank r's send, for every rank; recv holds
  // size() * bytes. send and recv must not overlap.
  virtual Status all_gather(const void* send, size_t bytes, void* recv) = 0;
  // Rank `root`'s data[0..bytes) to every rank.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status barrier() = 0;

  // MPI_Comm_split: the ranks that pass the same color form a new communicator, ordered by
  // key (ties by rank), with this one's timeout(). Collective over this communicator.
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  // How long a collective waits for the other ranks before it fails (and breaks the
  // communicator); 0 = forever. Idle waits that are expected to be long (a worker waiting for
  // the next step) pass their own limit to wait_broadcast().
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // broadcast() that may wait as long as `timeout_s` (0 = forever) for the root to start it,
  // sleeping between polls so that an idle worker does not spin a core.
  virtual Status wait_broadcast(void* data, size_t bytes, int root, double timeout_s) = 0;

  // Variable-length broadcast of a byte string (the root's *bytes; resized on the others).
  Status broadcast_bytes(std::vector<uint8_t>* bytes, int root);
  // The same, waiting as wait_broadcast() does.
  Status wait_broadcast_bytes(std::vector<uint8_t>* bytes, int root, double timeout_s);

  // Non-ok once a collective has failed (the error it failed with). Unlike the collectives, it
  // may be called from any thread.
  virtual Status health() const = 0;

  // What this rank's all-reduces, all-gathers and broadcasts have cost so far (benchmarks: the
  // collectives' share of a step): calls, this rank's payload bytes, and the seconds spent in
  // them, waiting for slower ranks included. Idle waits (wait_broadcast) are not counted.
  struct Stats {
    int64_t calls = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  Stats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  void record(size_t bytes, double seconds) {
    ++stats_.calls;
    stats_.bytes += static_cast<int64_t>(bytes);
    stats_.seconds += seconds;
  }

  double timeout_s_ = 0;
  Stats stats_;
};

// The size-1 communicator: every collective is a copy or nothing.
std::unique_ptr<Communicator> single_process();

// Whether this binary was built with MPI.
bool mpi_available();
// Whether this process was started by an MPI launcher (mpirun/mpiexec set the environment).
bool launched_by_mpi();

// The world communicator: MPI's when launched by mpirun (MPI_Init_thread, MPI_THREAD_SERIALIZED,
// on the first call; MPI_Finalize at exit), else single_process(); the same object on every
// call. An error when mpirun started several ranks but the binary has no MPI, naming the build
// option. At exit, a process whose world communicator broke skips MPI_Finalize (it would wait
// for the ranks that were lost; mpirun then ends the job and reports this rank).
Result<std::shared_ptr<Communicator>> world();

// Ends the process with `exit_code` and, under MPI, every rank of the job at once (MPI_Abort):
// for a rank that fails on its own (a model that does not load, a fatal error), whose peers
// would otherwise wait for it in their next collective. Without MPI, std::exit(exit_code).
// A process that merely returns from main still finalizes MPI at exit, which waits for every
// rank (at most 60 s, then it exits non-zero).
[[noreturn]] void abort_job(int exit_code);

}  // namespace qs::dist
