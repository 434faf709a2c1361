// server: the data-parallel front end (see dp_front.h).
#include "server/dp_front.h"

#include <httplib.h>

#include <algorithm>
#include <optional>

#include "core/log.h"
#include "server/client_connection.h"
#include "server/dp_metrics.h"
#include "server/generation_handler.h"
#include "server/http_envelope.h"
#include "server/http_task_queue.h"
#include "server/openai_response.h"

namespace qs::server {

// Bodies past this are refused (413) before they are read, as by the replicas.
constexpr size_t kFrontMaxBodyBytes = 64u << 20;
// A replica may think for a long time before a non-streamed answer's first byte; a replica
// that stopped answering is found by the health monitor instead, which cuts its requests.
constexpr std::chrono::seconds kUpstreamReadTimeout{3600};
constexpr std::chrono::seconds kUpstreamConnectTimeout{5};
constexpr std::chrono::seconds kReplicaProbeTimeout{2};  // /health, /metrics, /v1/models

// One request's call to a replica, run on its own thread so that the HTTP thread can relay
// the answer while it arrives.
class UpstreamCall {
 public:
  struct Progress {
    bool headers = false;  // the status line and headers are in
    bool done = false;     // the call returned
    bool ok = false;       // ... with the whole answer
    int status = 0;
    std::string content_type;
    std::string error;   // why it failed
    size_t pending = 0;  // body bytes not taken yet
  };

  UpstreamCall(const ReplicaAddress& to, httplib::Request request,
               std::chrono::seconds read_timeout)
      : client_(to.host, to.port), request_(std::move(request)) {
    client_.set_connection_timeout(kUpstreamConnectTimeout);
    client_.set_read_timeout(read_timeout);
    client_.set_write_timeout(std::chrono::seconds(60));
    client_.set_keep_alive(false);
  }
  ~UpstreamCall() {
    cancel();
    if (thread_.joinable()) thread_.join();
  }
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  // The front no longer wants the answer: the connection is closed, which the replica takes
  // as a client gone and aborts the request.
  void cancel() {
    if (cancelled_.exchange(true)) return;
    client_.stop();
  }
  bool cancelled() const { return cancelled_; }

  // Waits up to `timeout` for `until` to hold; returns the progress then.
  template <class Pred>
  Progress wait(Pred until, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return until(snapshot()); });
    return snapshot();
  }

  // The body bytes received since the last call.
  std::string take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    out.swap(body_);
    return out;
  }

 private:
  Progress snapshot() const {
    Progress p = p_;
    p.pending = body_.size();
    return p;
  }

  void run() {
    httplib::Request r = request_;
    r.response_handler = [this](const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      p_.headers = true;
      p_.status = res.status;
      p_.content_type = res.get_header_value("Content-Type");
      cv_.notify_all();
      return !cancelled_;
    };
    r.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(mu_);
      body_.append(data, n);
      cv_.notify_all();
      return !cancelled_;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool ok = client_.send(r, res, error);
    std::lock_guard<std::mutex> lock(mu_);
    p_.done = true;
    p_.ok = ok;
    if (!ok) p_.error = httplib::to_string(error);
    cv_.notify_all();
  }

  httplib::Client client_;
  const httplib::Request request_;
  std::thread thread_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Progress p_;
  std::string body_;
};

namespace {

bool is_event_stream(const std::string& content_type) {
  return content_type.rfind("text/event-stream", 0) == 0;
}

// The headers a replica needs from the client's request: the key it checks, the body's type,
// and the request id the front gave, so that both logs and the response name one id.
httplib::Headers forwarded_headers(const httplib::Request& req, const std::string& request_id) {
  httplib::Headers h;
  for (const char* name : {"Authorization", "Accept"}) {
    if (req.has_header(name)) h.emplace(name, req.get_header_value(name));
  }
  h.emplace(kRequestIdHeader, request_id);
  return h;
}

// Relays a replica's event stream to the client whole events at a time, so that an error
// event written after a cut never lands inside a half-sent one.
class SseRelay {
 public:
  SseRelay(std::shared_ptr<UpstreamCall> call, int replica, const std::atomic<bool>& stopping)
      : call_(std::move(call)), replica_(replica), stopping_(stopping) {}

  // One call of the content provider: false ends the response as failed (client gone, or
  // the front stopping).
  bool step(httplib::DataSink& sink) {
    const UpstreamCall::Progress p =
        call_->wait([](const UpstreamCall::Progress& q) { return q.done || q.pending > 0; },
                    std::chrono::milliseconds(200));
    pending_ += call_->take();
    if (const size_t end = pending_.rfind("\n\n"); end != std::string::npos) {
      if (!sink.write(pending_.data(), end + 2)) return false;
      pending_.erase(0, end + 2);
    }
    if (stopping_) return false;
    if (!p.done) return true;
    if (p.ok) {
      if (!pending_.empty() && !sink.write(pending_.data(), pending_.size())) return false;
    } else {
      const std::string event =
          sse_event(service_unavailable("The engine replica serving this request failed (replica " +
                                        std::to_string(replica_) + ": " + p.error +
                                        "); the output above is incomplete.")
                        .to_json());
      if (!sink.write(event.data(), event.size())) return false;
    }
    sink.done();
    return true;
  }

 private:
  std::shared_ptr<UpstreamCall> call_;
  const int replica_;
  const std::atomic<bool>& stopping_;
  std::string pending_;  // bytes of an event not yet complete
};

}  // namespace

bool replica_answers_health(const ReplicaAddress& replica) {
  httplib::Client c(replica.host, replica.port);
  c.set_connection_timeout(kReplicaProbeTimeout);
  c.set_read_timeout(kReplicaProbeTimeout);
  const httplib::Result r = c.Get("/health");
  return r && r->status == 200;
}

DpFront::DpFront(DpFrontOptions options, std::vector<ReplicaAddress> replicas,
                 const ModelInfo* model, std::function<bool(int)> process_ended)
    : options_(std::move(options)),
      replicas_(std::move(replicas)),
      model_(model),
      process_ended_(std::move(process_ended)),
      router_([&] {
        DpRouterOptions o = options_.router;
        o.n_replicas = static_cast<int>(replicas_.size());
        return o;
      }()),
      http_(std::make_unique<httplib::Server>()),
      calls_(replicas_.size()),
      ended_(replicas_.size(), false),
      failed_polls_(replicas_.size(), 0) {
  install_routes();
}

DpFront::~DpFront() {
  stop();
  if (monitor_.joinable()) monitor_.join();
}

void DpFront::install_routes() {
  httplib::Server& s = *http_;
  const int n_threads = std::max(options_.http_threads, 4);
  s.new_task_queue = [n_threads] { return new HttpTaskQueue(static_cast<size_t>(n_threads)); };
  s.set_payload_max_length(kFrontMaxBodyBytes);
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    assign_request_id(req, res);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  install_error_envelope_and_access_log(s);

  auto generate = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      proxy_generation(endpoint, req, res, res.get_header_value(kRequestIdHeader));
    };
  };
  s.Post("/v1/completions", generate(Endpoint::kCompletions));
  s.Post("/v1/chat/completions", generate(Endpoint::kChat));
  auto any = [this](const httplib::Request& req, httplib::Response& res) {
    proxy_any(req, res, res.get_header_value(kRequestIdHeader));
  };
  for (const char* path :
       {"/v1/images/generations", "/v1/audio/transcriptions", "/tokenize", "/detokenize"}) {
    s.Post(path, any);
  }
  s.Get("/v1/models", any);
  s.Get("/version", any);
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (router_.n_healthy() > 0) return;
    send_error(res, service_unavailable("No engine replica is running."));
  };
  s.Get("/health", health);
  s.Get("/ping", health);
  s.Post("/ping", health);
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Result<int> DpFront::bind() {
  return bind_listener(*http_, options_.host, options_.port);
}

Status DpFront::serve() {
  {
    // httplib's stop() does nothing before the listener runs: a stop() that came first is
    // seen here instead, and one that comes while the listener starts waits for it.
    std::lock_guard<std::mutex> lock(listen_mu_);
    if (stopping_) return ok_status();
    listening_ = true;
  }
  monitor_ = std::thread([this] { monitor_health(); });
  const bool listened = http_->listen_after_bind();
  {
    std::lock_guard<std::mutex> lock(listen_mu_);
    listening_ = false;
  }
  stop();
  monitor_.join();
  if (!listened && !draining_) return io_error("the HTTP listener stopped unexpectedly");
  return ok_status();
}

void DpFront::begin_drain() {
  draining_ = true;
}

bool DpFront::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(idle_mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return in_flight_ == 0; });
}

void DpFront::stop() {
  bool listening = false;
  {
    std::lock_guard<std::mutex> lock(listen_mu_);
    if (stopping_.exchange(true)) return;
    listening = listening_;
  }
  draining_ = true;
  {
    std::lock_guard<std::mutex> lock(monitor_mu_);
    monitor_cv_.notify_all();
  }
  if (!listening) return;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(listen_mu_);
      if (!listening_ || http_->is_running()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  http_->stop();
}

void DpFront::request_started() {
  std::lock_guard<std::mutex> lock(idle_mu_);
  ++in_flight_;
}

void DpFront::request_ended() {
  std::lock_guard<std::mutex> lock(idle_mu_);
  if (--in_flight_ == 0) idle_cv_.notify_all();
}

std::shared_ptr<UpstreamCall> DpFront::start_call(int replica, const httplib::Request& req,
                                                  const std::string& request_id) {
  httplib::Request up;
  up.method = req.method;
  up.path = req.path;
  up.headers = forwarded_headers(req, request_id);
  up.body = req.body;
  if (!req.body.empty()) {
    std::string type = req.get_header_value("Content-Type");
    up.headers.emplace("Content-Type", type.empty() ? "application/json" : type);
  }
  auto call =
      std::make_shared<UpstreamCall>(replicas_[replica], std::move(up), kUpstreamReadTimeout);
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls_[replica].insert(call);
  }
  call->start();
  return call;
}

void DpFront::end_call(int replica, const std::shared_ptr<UpstreamCall>& call) {
  call->cancel();
  std::lock_guard<std::mutex> lock(calls_mu_);
  calls_[replica].erase(call);
}

void DpFront::cut_calls(int replica) {
  std::vector<std::shared_ptr<UpstreamCall>> calls;
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls.assign(calls_[replica].begin(), calls_[replica].end());
  }
  for (const auto& call : calls) call->cancel();
}

void DpFront::set_replica_state(int replica, bool healthy, const std::string& reason) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  if (healthy && ended_[replica]) return;
  if (router_.healthy(replica) == healthy) return;
  router_.set_healthy(replica, healthy);
  const ReplicaAddress& a = replicas_[replica];
  const int n = router_.n_healthy();
  if (healthy) {
    QS_LOG_INFO("replica %d (%s:%d) is back in routing: %s; %d of %d replicas serving", replica,
                a.host.c_str(), a.port, reason.c_str(), n, router_.n_replicas());
  } else {
    QS_LOG_WARN("replica %d (%s:%d) left routing: %s; %d of %d replicas serving", replica,
                a.host.c_str(), a.port, reason.c_str(), n, router_.n_replicas());
  }
}

void DpFront::monitor_health() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(monitor_mu_);
      monitor_cv_.wait_for(lock, options_.health_interval, [this] { return stopping_.load(); });
    }
    if (stopping_) return;
    // Replicas stopped on purpose are no news.
    if (draining_) continue;
    for (int i = 0; i < router_.n_replicas() && !stopping_ && !draining_; ++i) {
      {
        std::lock_guard<std::mutex> lock(calls_mu_);
        if (ended_[i]) continue;
      }
      if (process_ended_ && process_ended_(i)) {
        {
          std::lock_guard<std::mutex> lock(calls_mu_);
          ended_[i] = true;
        }
        set_replica_state(i, false, "its process ended");
        cut_calls(i);
        continue;
      }
      httplib::Client probe(replicas_[i].host, replicas_[i].port);
      probe.set_connection_timeout(kReplicaProbeTimeout);
      probe.set_read_timeout(kReplicaProbeTimeout);
      const httplib::Result r = probe.Get("/health");
      if (r && r->status == 200) {
        failed_polls_[i] = 0;
        set_replica_state(i, true, "/health answers 200");
        continue;
      }
      const std::string why =
          r ? "/health answered " + std::to_string(r->status) : "/health: " + to_string(r.error());
      set_replica_state(i, false, why);
      if (++failed_polls_[i] == options_.failed_polls_to_cut) {
        QS_LOG_WARN("replica %d failed %d health checks in a row: ending its requests", i,
                    failed_polls_[i]);
        cut_calls(i);
      }
    }
  }
}

void DpFront::proxy_generation(Endpoint endpoint, const httplib::Request& req,
                               httplib::Response& res, const std::string& request_id) {
  if (draining_) {
    return send_error(res, service_unavailable("The server is shutting down."));
  }
  // The prompt as the replica will see it, for its block hashes; a request the front cannot
  // parse is routed by load, and the replica gives the client its error.
  std::vector<std::vector<uint64_t>> prompts;
  if (model_ != nullptr) {
    GenerationRequest parsed;
    if (!parse_generation_request(endpoint, req.body, *model_, &parsed)) {
      for (const Prompt& p : parsed.prompts) {
        prompts.push_back(prompt_block_hashes(p.ids, p.mm_items));
      }
    }
  }
  const std::vector<uint64_t> no_prompt;
  const std::vector<uint64_t>& key = prompts.empty() ? no_prompt : prompts[0];
  const std::optional<ClientConnection> client = ClientConnection::of(req);
  request_started();
  std::vector<int> tried;
  // A replica that fails before the client got a byte: once more on another one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const DpChoice choice = router_.route(key, tried);
    const int replica = choice.replica;
    if (replica < 0) break;
    for (size_t p = 1; p < prompts.size(); ++p) router_.remember(replica, prompts[p]);
    QS_LOG_INFO("request %s: replica %d (%s, %lld of %zu prompt blocks matched)",
                request_id.c_str(), replica, choice.prefix_routed ? "prefix" : "load",
                static_cast<long long>(choice.matched_blocks), key.size());
    std::shared_ptr<UpstreamCall> call = start_call(replica, req, request_id);
    UpstreamCall::Progress p;
    // A stream is relayed from its first bytes on; any other answer once it is whole.
    auto ready = [](const UpstreamCall::Progress& q) {
      return q.done || (q.pending > 0 && is_event_stream(q.content_type));
    };
    for (;;) {
      p = call->wait(ready, kHangUpPollInterval);
      if (ready(p)) break;
      if (stopping_) {
        // The drain timed out with this answer still pending: nothing reached the client.
        end_call(replica, call);
        router_.finish(replica);
        request_ended();
        return send_error(res, service_unavailable("The server is shutting down."));
      }
      if (client && client->hung_up()) {
        QS_LOG_INFO("request %s: client went away, aborting", request_id.c_str());
        end_call(replica, call);
        router_.finish(replica);
        request_ended();
        res.status = kClientClosedRequest;
        return;
      }
    }
    if (p.done && !p.ok) {
      const bool cut = call->cancelled();  // by the monitor: the replica is already out
      end_call(replica, call);
      router_.finish(replica);
      if (!cut) set_replica_state(replica, false, "a request to it failed: " + p.error);
      tried.push_back(replica);
      QS_LOG_WARN("request %s: replica %d failed before answering (%s)%s", request_id.c_str(),
                  replica, p.error.c_str(), attempt == 0 ? "; trying another replica" : "");
      continue;
    }
    res.status = p.status;
    if (p.done) {
      res.set_content(call->take(), p.content_type.empty() ? "application/json" : p.content_type);
      end_call(replica, call);
      router_.finish(replica);
      request_ended();
      return;
    }
    auto relay = std::make_shared<SseRelay>(call, replica, stopping_);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [relay](size_t, httplib::DataSink& sink) { return relay->step(sink); },
        [this, call, replica, released = std::make_shared<std::atomic<bool>>(false)](bool) {
          if (released->exchange(true)) return;  // a copied Response releases again
          end_call(replica, call);
          router_.finish(replica);
          request_ended();
        });
    return;
  }
  request_ended();
  send_error(res,
             service_unavailable(tried.empty() ? "No engine replica is available."
                                               : "The engine replica serving this request failed, "
                                                 "and no other replica is available."));
}

void DpFront::proxy_any(const httplib::Request& req, httplib::Response& res,
                        const std::string& request_id) {
  if (draining_ && req.method == "POST") {
    return send_error(res, service_unavailable("The server is shutting down."));
  }
  // Reads (models, version) go to the first healthy replica and are not counted as routed;
  // work (tokenizing, images, transcriptions) goes where the load is least.
  const bool work = req.method == "POST";
  std::vector<int> tried;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int replica = -1;
    if (work) {
      replica = router_.route({}, tried).replica;
    } else {
      for (int i = 0; i < router_.n_replicas() && replica < 0; ++i) {
        if (router_.healthy(i) && std::find(tried.begin(), tried.end(), i) == tried.end()) {
          replica = i;
        }
      }
    }
    if (replica < 0) break;
    httplib::Client c(replicas_[replica].host, replicas_[replica].port);
    c.set_connection_timeout(kUpstreamConnectTimeout);
    c.set_read_timeout(work ? kUpstreamReadTimeout : kReplicaProbeTimeout);
    const httplib::Headers headers = forwarded_headers(req, request_id);
    const httplib::Result r = [&] {
      if (!work) return c.Get(req.path.c_str(), headers);
      if (req.is_multipart_form_data()) {
        httplib::MultipartFormDataItems items;
        for (const auto& [name, file] : req.files) items.push_back(file);
        return c.Post(req.path.c_str(), headers, items);
      }
      const std::string type = req.get_header_value("Content-Type");
      return c.Post(req.path.c_str(), headers, req.body, type.empty() ? "application/json" : type);
    }();
    if (work) router_.finish(replica);
    if (r) {
      res.status = r->status;
      const std::string type = r->get_header_value("Content-Type");
      res.set_content(r->body, type.empty() ? "application/json" : type);
      return;
    }
    set_replica_state(replica, false, "a request to it failed: " + to_string(r.error()));
    tried.push_back(replica);
  }
  send_error(res, service_unavailable("No engine replica is available."));
}

std::string DpFront::render_metrics() {
  std::vector<std::pair<int, std::string>> scraped;
  for (int i = 0; i < router_.n_replicas(); ++i) {
    if (!router_.healthy(i)) continue;
    httplib::Client c(replicas_[i].host, replicas_[i].port);
    c.set_connection_timeout(kReplicaProbeTimeout);
    c.set_read_timeout(kReplicaProbeTimeout);
    if (const httplib::Result r = c.Get("/metrics"); r && r->status == 200) {
      scraped.emplace_back(i, r->body);
    }
  }
  return merge_replica_metrics(scraped) +
         render_router_metrics(router_.stats(), options_.served_model_name);
}

}  // namespace qs::server
