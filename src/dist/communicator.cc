// dist: what every communicator shares (the variable-length broadcast on top of the
// fixed-size one), the size-1 implementation, and the choice of the world communicator from
// how the process was started.
#include "dist/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dist/mpi_communicator.h"

namespace qs::dist {

namespace {

// The size first, then the bytes: the receivers cannot know the length in advance, and MPI
// has no variable-count broadcast. The size travels as a fixed 8-byte integer so that ranks
// built alike agree on its layout.
Status broadcast_sized(Communicator* comm, std::vector<uint8_t>* bytes, int root,
                       double first_wait_s, bool wait_for_root) {
  uint64_t n = comm->rank() == root ? bytes->size() : 0;
  QS_RETURN_IF_ERROR(wait_for_root ? comm->wait_broadcast(&n, sizeof(n), root, first_wait_s)
                                   : comm->broadcast(&n, sizeof(n), root));
  if (comm->rank() != root) bytes->resize(n);
  if (n == 0) return ok_status();
  // The root has started the exchange, so the rest follows at once: the ordinary timeout.
  return comm->broadcast(bytes->data(), n, root);
}

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "single process"; }

  Status all_reduce_sum(float*, int64_t n) override { return check_count(n); }
  Status all_reduce_sum_bf16(uint16_t*, int64_t n) override { return check_count(n); }
  Status all_gather(const void* send, size_t bytes, void* recv) override {
    if (bytes > 0) std::memcpy(recv, send, bytes);
    return ok_status();
  }
  Status broadcast(void*, size_t, int root) override { return check_root(root); }
  Status wait_broadcast(void*, size_t, int root, double) override { return check_root(root); }
  Status barrier() override { return ok_status(); }
  Result<std::unique_ptr<Communicator>> split(int color, int) override {
    if (color < 0) return invalid_argument("split: color " + std::to_string(color) + " < 0");
    auto out = std::make_unique<SingleProcess>();
    out->set_timeout(timeout());
    return std::unique_ptr<Communicator>(std::move(out));
  }
  Status health() const override { return ok_status(); }

 private:
  static Status check_count(int64_t n) {
    return n < 0 ? invalid_argument("all_reduce_sum: count " + std::to_string(n) + " < 0")
                 : ok_status();
  }
  static Status check_root(int root) {
    return root == 0 ? ok_status()
                     : invalid_argument("broadcast: root " + std::to_string(root) +
                                        " outside a communicator of 1 rank");
  }
};

// The world size the launcher announced, or -1 where it names none (Open MPI's own variable,
// then the PMI one that MPICH's Hydra and Slurm's srun set).
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && v[0] != '\0') return std::atoi(v);
  }
  return -1;
}

}  // namespace

Status Communicator::broadcast_bytes(std::vector<uint8_t>* bytes, int root) {
  return broadcast_sized(this, bytes, root, 0, false);
}

Status Communicator::wait_broadcast_bytes(std::vector<uint8_t>* bytes, int root, double timeout_s) {
  return broadcast_sized(this, bytes, root, timeout_s, true);
}

std::unique_ptr<Communicator> single_process() {
  return std::make_unique<SingleProcess>();
}

bool mpi_available() {
#ifdef QS_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  // Open MPI's mpirun, PMIx launchers (Open MPI 5, Slurm with PMIx), PMI-1/2 launchers (MPICH's
  // Hydra, Slurm's srun --mpi=pmi2).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Result<std::shared_ptr<Communicator>> world() {
#ifdef QS_HAVE_MPI
  if (launched_by_mpi()) return mpi_world();
#endif
  const int launched_size = launched_by_mpi() ? launcher_world_size() : 1;
  if (launched_size != 1) {
    return unavailable(
        (launched_size > 1 ? "mpirun started " + std::to_string(launched_size) + " ranks"
                           : std::string("an MPI launcher started this process")) +
        ", but this quantserve was built without MPI: install Open MPI (apt-get install "
        "libopenmpi-dev openmpi-bin) and rebuild with -DQS_MPI=ON");
  }
  // One rank, whether or not mpirun started it: nothing to exchange.
  static std::mutex mu;
  static std::shared_ptr<Communicator> single;
  std::lock_guard<std::mutex> lock(mu);
  if (!single) single = single_process();
  return single;
}

void abort_job(int exit_code) {
  std::fflush(nullptr);
#ifdef QS_HAVE_MPI
  mpi_abort_job(exit_code);
#endif
  std::exit(exit_code);
}

}  // namespace qs::dist
