// bench_client: what the client measured for one streamed request, and how the stream's events turn
// into it, as vLLM's request functions (vllm/benchmarks/lib/endpoint_request_func.py) do:
// a chunk with non-empty `choices` is a token event (its text may be empty); TTFT is the
// first event's time, ITL the gaps between events (one chunk may carry several tokens),
// latency the last event's time; the trailing usage-only chunk extends nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qs::bench {

struct RequestOutput {
  bool success = false;
  std::string generated_text;
  double start_time = 0;      // seconds from the benchmark start, when the request was sent
  double ttft = 0;            // seconds
  std::vector<double> itl;    // seconds, one per token event after the first
  double latency = 0;         // seconds, start to last token event
  int64_t prompt_len = 0;     // the dataset's count, replaced by usage.prompt_tokens if given
  int64_t output_tokens = 0;  // usage.completion_tokens; 0 when the server sent no usage
  std::string error;
};

// Feeds one request's SSE payloads, each with its arrival time (seconds on the clock of
// `start`), into a RequestOutput. `chat` reads choices[0].delta.content instead of .text.
class StreamAccumulator {
 public:
  StreamAccumulator(bool chat, double start, int64_t prompt_len);

  // One event's data. "[DONE]" ends the stream; a payload that is not JSON is an error that
  // fails the request.
  void on_event(std::string_view data, double t);
  // Whether "[DONE]" or an error has been seen.
  bool done() const { return done_; }
  // The result once the stream ended: success iff a token event arrived and nothing failed.
  RequestOutput finish();

 private:
  bool chat_;
  bool done_ = false;
  bool got_token_ = false;
  double last_t_ = 0;
  RequestOutput out_;
};

}  // namespace qs::bench
