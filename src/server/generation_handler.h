// server: POST /v1/completions and /v1/chat/completions. A request is parsed and validated,
// split into one EngineRequest per choice (prompt x n), submitted to the backend, and
// answered either as one JSON body when every choice has finished or as server-sent events
// while they run. The HTTP thread only waits and writes; tokens come from the engine thread
// through the backend's callbacks. A client that goes away (stream or not) aborts its choices.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace qs::server {

// The backend ids of every generation request the HTTP side still serves, so that a
// shutdown can abort them and wait for their responses to end.
class InflightRequests {
 public:
  void add(const std::vector<std::string>& ids);
  void remove(const std::vector<std::string>& ids);
  std::vector<std::string> ids() const;
  // True once no request is in flight; false if `timeout` passed first.
  bool wait_empty(std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::multiset<std::string> ids_;
};

class GenerationHandler {
 public:
  // All references must outlive the handler.
  // `prompt_tokens_details`: usage carries cached_tokens (vLLM's
  // --enable-prompt-tokens-details).
  GenerationHandler(const ModelInfo& model, GenerationBackend& backend, ServerMetrics& metrics,
                    InflightRequests& inflight, bool prompt_tokens_details);

  // `request_id` names the request in responses ("cmpl-<id>") and logs.
  void handle(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
              const std::string& request_id);

 private:
  const ModelInfo& model_;
  GenerationBackend& backend_;
  ServerMetrics& metrics_;
  InflightRequests& inflight_;
  const bool prompt_tokens_details_;
};

// Writes an ApiError as the response body with its HTTP status.
void send_error(httplib::Response& res, const ApiError& error);

// A fresh id for a request that brought no X-Request-Id: 32 random hex digits.
std::string random_request_id();

}  // namespace qs::server
