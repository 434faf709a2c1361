// server: the HTTP front end of `serve --data-parallel-size N`: vLLM's OpenAI endpoints on one
// address, each request proxied to one of N replica servers. Generation requests are routed
// by DpRouter (the longest cached prefix, else the least loaded), their streams relayed
// chunk by chunk as they come; the other endpoints go to any healthy replica. /health is 200
// while one replica serves, /metrics merges the replicas' metrics under a replica="i" label with
// the router's own.
//
// Failure: a replica that refuses connections, fails /health (polled every second) or whose
// process ended leaves routing; one that answers /health again comes back, one whose process
// ended never does. A request whose replica fails before any byte reached the client is
// retried once on another replica; a stream cut after that ends with an error event and no
// [DONE], so that no client takes it for complete. With no replica left, requests get 503.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/dp_router.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace qs::server {

struct ReplicaAddress {
  std::string host;
  int port = 0;
};

struct DpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;  // /metrics' model_name label for the router's own series
  DpRouterOptions router;
  int http_threads = 64;  // concurrent connections; a relayed stream holds one
  std::chrono::milliseconds health_interval{1000};
  // Consecutive failed /health polls after which a replica's requests in flight are cut (it
  // stopped answering); one failure already takes it out of routing.
  int failed_polls_to_cut = 3;
};

// Whether a replica answers GET /health with 200 within a couple of seconds.
bool replica_answers_health(const ReplicaAddress& replica);

class UpstreamCall;

class DpFront {
 public:
  // `model`: the tokenizer and chat template that turn a request into the prompt a replica
  // will see, for prefix routing; null routes by load alone. `process_ended(i)`: whether
  // replica i's process is known to have ended (a local child), checked at each poll.
  DpFront(DpFrontOptions options, std::vector<ReplicaAddress> replicas, const ModelInfo* model,
          std::function<bool(int)> process_ended);
  ~DpFront();

  // Binds the listening socket; returns the port.
  Result<int> bind();
  // Serves (and polls the replicas' health) until stop().
  Status serve();
  // New requests get 503 from now on; the health monitor stops judging replicas, which are
  // about to be stopped on purpose.
  void begin_drain();
  // True once no proxied request is in flight; false if `timeout` passed first.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Stops the listener and the health monitor. Thread-safe and idempotent.
  void stop();

 private:
  void install_routes();
  void monitor_health();
  void set_replica_state(int replica, bool healthy, const std::string& reason);
  void cut_calls(int replica);

  void proxy_generation(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
                        const std::string& request_id);
  void proxy_any(const httplib::Request& req, httplib::Response& res,
                 const std::string& request_id);
  std::string render_metrics();

  void request_started();
  void request_ended();
  std::shared_ptr<UpstreamCall> start_call(int replica, const httplib::Request& req,
                                           const std::string& request_id);
  void end_call(int replica, const std::shared_ptr<UpstreamCall>& call);

  const DpFrontOptions options_;
  const std::vector<ReplicaAddress> replicas_;
  const ModelInfo* model_;
  const std::function<bool(int)> process_ended_;
  DpRouter router_;
  std::unique_ptr<httplib::Server> http_;

  std::mutex calls_mu_;
  std::vector<std::set<std::shared_ptr<UpstreamCall>>> calls_;  // per replica, in flight
  std::vector<bool> ended_;        // process gone: out of routing for good (under calls_mu_)
  std::vector<int> failed_polls_;  // consecutive (monitor thread only)

  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  int64_t in_flight_ = 0;

  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::mutex listen_mu_;
  bool listening_ = false;  // serve() is in, or about to enter, the listener (under listen_mu_)
  std::mutex monitor_mu_;
  std::condition_variable monitor_cv_;
  std::thread monitor_;
};

}  // namespace qs::server
