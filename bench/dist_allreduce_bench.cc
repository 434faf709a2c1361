// Kernel lab: the dist/ all-reduce's latency and bandwidth between ranks, f32 from 4 KiB to
// 16 MiB, blocking (no timeout) and under a deadline (the non-blocking forms polled), and the
// bf16 form at the same element counts. Every rank runs the same fixed number of calls (Google
// Benchmark's adaptive counts would differ between ranks and mismatch the collectives); rank 0
// prints microseconds per call (the best of 3 rounds' means), the algorithm bandwidth (bytes /
// time) and the bus bandwidth (x 2 (n - 1) / n, NCCL's measure, comparable across rank counts).
//   mpirun -np 2 build/dist_allreduce_bench [--max-mib 16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "dist/communicator.h"

namespace {

using namespace qs;

// Seconds per call of `call` (all ranks in step: a barrier before each round).
template <typename Call>
double time_per_call(dist::Communicator* comm, int reps, Call call) {
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    if (!comm->barrier().ok()) std::exit(1);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) {
      if (!call()) std::exit(1);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s / reps);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = size_t{16} << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-mib") == 0) max_bytes = size_t(std::atoi(argv[i + 1])) << 20;
  }
  auto world = dist::world();
  if (!world.ok()) {
    std::fprintf(stderr, "dist_allreduce_bench: %s\n", world.status().to_string().c_str());
    return 1;
  }
  dist::Communicator* comm = world->get();
  const int n_ranks = comm->size();
  if (comm->rank() == 0) {
    std::printf("all_reduce_sum over %s\n", comm->describe().c_str());
    std::printf("%10s %10s %10s %10s %12s %10s\n", "f32 bytes", "us/call", "alg GB/s", "bus GB/s",
                "timed us", "bf16 us");
  }
  for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const auto n = static_cast<int64_t>(bytes / sizeof(float));
    std::vector<float> f32(static_cast<size_t>(n), 0.0f);
    std::vector<uint16_t> bf16(static_cast<size_t>(n), 0);
    // About 64 MiB moved per round, at least 10 calls.
    const int reps = static_cast<int>(std::max<size_t>(10, (size_t{64} << 20) / bytes));
    // A warm-up call sizes the scratch buffers and sets up MPI's connections.
    if (!comm->all_reduce_sum(f32.data(), n).ok()) return 1;

    comm->set_timeout(0);
    const double blocking =
        time_per_call(comm, reps, [&] { return comm->all_reduce_sum(f32.data(), n).ok(); });
    comm->set_timeout(60);
    const double timed =
        time_per_call(comm, reps, [&] { return comm->all_reduce_sum(f32.data(), n).ok(); });
    comm->set_timeout(0);
    const double half =
        time_per_call(comm, reps, [&] { return comm->all_reduce_sum_bf16(bf16.data(), n).ok(); });
    if (comm->rank() == 0) {
      const double alg = static_cast<double>(bytes) / blocking / 1e9;
      std::printf("%10zu %10.1f %10.2f %10.2f %12.1f %10.1f\n", bytes, blocking * 1e6, alg,
                  alg * 2.0 * (n_ranks - 1) / n_ranks, timed * 1e6, half * 1e6);
    }
  }
  return 0;
}
