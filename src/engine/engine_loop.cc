// engine: EngineLoop (see engine_loop.h).
#include "engine/engine_loop.h"

#include <chrono>

#include "core/check.h"

namespace qs::engine {
namespace {

// How often an idle engine with tensor-parallel ranks checks on them.
constexpr std::chrono::seconds kHeartbeatInterval{2};

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), config_(engine_->config()) {
  QS_CHECK(engine_ != nullptr);
  stats_ = engine_->stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  shutdown();
}

Status EngineLoop::submit(EngineRequest request, Callback callback) {
  // validate() reads only the engine's fixed configuration, so it is safe off its thread.
  QS_RETURN_IF_ERROR(engine_->validate(request));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!health_.ok()) return health_;
    if (!accepting_) return unimplemented("the engine is shutting down");
    incoming_.emplace_back(std::move(request), std::move(callback));
  }
  wake_.notify_one();
  return ok_status();
}

void EngineLoop::abort(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  wake_.notify_one();
}

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status EngineLoop::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

void EngineLoop::shutdown(bool abort_in_flight) {
  std::lock_guard<std::mutex> join_lock(join_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    stopping_ = true;
    abort_in_flight_ = abort_in_flight;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::deliver(const RequestOutput& out) {
  auto it = callbacks_.find(out.id);
  if (it == callbacks_.end()) return;
  it->second(out);
  if (out.finished) callbacks_.erase(it);
}

void EngineLoop::run() {
  while (true) {
    std::vector<std::pair<EngineRequest, Callback>> incoming;
    std::vector<std::string> aborts;
    bool stopping = false;
    bool abort_in_flight = false;
    const bool busy = engine_->has_unfinished();
    bool idle = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] { return busy || stopping_ || !incoming_.empty() || !aborts_.empty(); };
      if (engine_->distributed()) {
        idle = !wake_.wait_for(lock, kHeartbeatInterval, ready);
      } else {
        wake_.wait(lock, ready);
      }
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      stopping = stopping_;
      abort_in_flight = abort_in_flight_;
    }
    // New requests before aborts, so that an abort right after its submit finds the request.
    for (auto& [request, callback] : incoming) {
      const std::string id = request.id;
      Status s = engine_->add_request(std::move(request));
      if (!s.ok()) {
        RequestOutput out;
        out.id = id;
        out.finished = true;
        out.finish_reason = "abort";
        out.error = s;
        callback(out);
        continue;
      }
      callbacks_.emplace(id, std::move(callback));
    }
    if (idle) {
      // Nothing to run for a while: make sure the other ranks are still there.
      Status health = engine_->heartbeat();
      std::lock_guard<std::mutex> lock(mu_);
      health_ = health;
    }
    for (const std::string& id : aborts) engine_->abort(id);
    if (stopping && abort_in_flight) engine_->abort_all();
    std::vector<RequestOutput> outputs;
    if (engine_->has_unfinished()) outputs = engine_->step();
    // Stats first: a caller woken by a request's final output then reads stats that already
    // count it (and its freed blocks), never the step before.
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = engine_->stats();
      health_ = engine_->health();
    }
    for (const RequestOutput& out : outputs) deliver(out);
    if (stopping && !engine_->has_unfinished()) break;
  }
}

}  // namespace qs::engine
