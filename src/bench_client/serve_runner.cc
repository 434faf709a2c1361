// bench_client: timed serving run (see serve_runner.h).
#include "bench_client/serve_runner.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <mutex>
#include <semaphore>
#include <thread>

#include "bench_client/arrivals.h"

namespace qs::bench {

Result<ServeRun> run_serve_benchmark(const Endpoint& ep, const std::vector<SampleRequest>& requests,
                                     const ServeRunOptions& o) {
  if (o.max_concurrency && *o.max_concurrency <= 0) {
    return invalid_argument("--max-concurrency must be greater than 0");
  }
  const int64_t n = static_cast<int64_t>(requests.size());
  QS_ASSIGN_OR_RETURN(std::vector<double> offsets,
                      arrival_offsets(n, o.request_rate, o.burstiness, o.seed));
  // Bodies are built before the clock starts so serialization never delays a send.
  std::vector<std::string> bodies;
  bodies.reserve(n);
  for (const SampleRequest& r : requests) {
    bodies.push_back(
        request_body(ep, o.model, r.prompt, r.expected_output_len, o.ignore_eos).dump());
  }

  ServeRun run;
  run.outputs.resize(n);
  std::counting_semaphore<INT_MAX> slots(
      o.max_concurrency ? static_cast<ptrdiff_t>(*o.max_concurrency) : INT_MAX);
  std::atomic<int64_t> n_done{0};
  std::mutex progress_mu;
  std::vector<std::thread> threads;
  threads.reserve(n);

  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::duration<double>(offsets[i])));
    threads.emplace_back([&, i] {
      slots.acquire();
      run.outputs[i] = send_streaming_request(ep, bodies[i], requests[i].prompt_len,
                                              o.request_id_prefix + std::to_string(i), start);
      slots.release();
      const int64_t done = ++n_done;
      if (o.progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        std::fprintf(stderr, "\r%lld/%lld requests done", static_cast<long long>(done),
                     static_cast<long long>(n));
        if (done == n) std::fprintf(stderr, "\n");
        std::fflush(stderr);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  run.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace qs::bench
