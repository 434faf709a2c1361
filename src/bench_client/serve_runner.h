// bench_client: the timed run of a serving benchmark. Requests leave at their arrival offsets (see
// arrivals.h), each on its own thread, at most max_concurrency in flight (a semaphore, as
// vLLM's asyncio.Semaphore; time waiting for it is not part of TTFT or E2EL, since the
// request's clock starts when it is sent). Duration runs from the first dispatch to the last
// completion.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_client/dataset.h"
#include "bench_client/http_stream_client.h"
#include "bench_client/request_output.h"
#include "core/status.h"

namespace qs::bench {

struct ServeRunOptions {
  std::string model;        // the request's "model" field
  double request_rate = 0;  // inf: all at t = 0
  double burstiness = 1.0;
  uint64_t seed = 0;
  std::optional<int64_t> max_concurrency;
  bool ignore_eos = false;
  bool progress = false;  // a one-line progress counter on stderr
  std::string request_id_prefix = "benchmark-serving";
};

struct ServeRun {
  std::vector<RequestOutput> outputs;  // in request order
  double duration_s = 0;
};

Result<ServeRun> run_serve_benchmark(const Endpoint& ep, const std::vector<SampleRequest>& requests,
                                     const ServeRunOptions& options);

}  // namespace qs::bench
