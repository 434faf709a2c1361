// bench_client: one streamed request to an OpenAI-compatible server (cpp-httplib; any server that
// speaks /v1/completions or /v1/chat/completions with `stream: true`), timed on the client's
// steady clock from just before the request is sent to each SSE event's arrival.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench_client/request_output.h"
#include "core/status.h"

namespace qs::bench {

struct Endpoint {
  std::string scheme_host_port;  // "http://127.0.0.1:8000"
  std::string prefix;            // the base URL's path, "" or e.g. "/api"
  std::string path;              // prefix + endpoint, e.g. "/v1/completions"
  bool chat = false;             // chat completions: messages in, delta.content out
  std::string api_key;           // sent as "Authorization: Bearer" when set ($OPENAI_API_KEY)
};

// `base_url` is scheme://host[:port][/prefix]; `endpoint` is appended to it as vLLM does.
Result<Endpoint> make_endpoint(const std::string& base_url, const std::string& endpoint);

// The request body vLLM's openai / openai-chat request functions send: max_tokens (chat:
// max_completion_tokens), stream with include_usage, ignore_eos when asked.
nlohmann::json request_body(const Endpoint& ep, const std::string& model, const std::string& prompt,
                            int64_t max_tokens, bool ignore_eos);

struct ServedModel {
  std::string id;    // the name requests use
  std::string root;  // what it was loaded from (vLLM: the model path); may be empty
};

// GET {prefix}/v1/models: the first model listed, as vLLM picks when --model is not given.
Result<ServedModel> first_served_model(const Endpoint& ep);

// Sends one request and reads its stream to the end. Never fails as a call: connection
// errors, HTTP errors and malformed streams come back as a failed RequestOutput with its
// error. Times are seconds since `bench_start`.
RequestOutput send_streaming_request(const Endpoint& ep, const std::string& body,
                                     int64_t prompt_len, const std::string& request_id,
                                     std::chrono::steady_clock::time_point bench_start);

}  // namespace qs::bench
