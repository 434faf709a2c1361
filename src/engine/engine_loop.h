// engine: the thread-safe front of an Engine for a server. A dedicated engine thread owns the
// Engine and alone drives the model's ThreadPool; HTTP threads submit requests, abort them and
// read stats through a mutex-guarded queue, and get each request's outputs through its
// callback, called on the engine thread. The engine thread sleeps on a condition variable
// while there is nothing to do.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace qs::engine {

class EngineLoop {
 public:
  // Called on the engine thread with every output of one request, the last one with
  // finished == true (also for aborts and errors). It must return quickly and must not call
  // back into the EngineLoop's shutdown(); submit(), abort() and stats() are fine.
  using Callback = std::function<void(const RequestOutput&)>;

  // Takes the engine and starts the engine thread. From here until shutdown() returns, the
  // engine's ThreadPool belongs to the engine thread: no other thread may run jobs on it.
  explicit EngineLoop(std::unique_ptr<Engine> engine);
  // shutdown() if not done yet.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request. Errors come back at once, nothing queued: invalid parameters or prompt
  // (Engine::validate), or the loop is shut down. A duplicate id among running requests is
  // reported through the callback (finished, error set), as it is only known on the engine
  // thread.
  Status submit(EngineRequest request, Callback callback);
  // Asks for the request to end; the engine thread frees its blocks at the next step and
  // its callback gets a final "abort" output. Safe at any time, from any thread, for any
  // id (unknown or finished ids are ignored).
  void abort(const std::string& id);
  // The stats as of the last step, published before that step's outputs are delivered.
  EngineStats stats() const;
  // Engine::health() as of the last step: non-ok once the model cannot run any more (a
  // tensor-parallel rank failed); submit() then refuses with it.
  Status health() const;
  // Stops accepting requests, then aborts the unfinished ones (abort_in_flight) or lets them
  // finish, and joins the engine thread. Idempotent; not from inside a callback.
  void shutdown(bool abort_in_flight = true);

  // The engine's configuration (fixed at creation; safe from any thread).
  const EngineConfig& config() const { return config_; }

 private:
  void run();
  // Delivers one output to its callback, forgetting the callback once the request is done.
  void deliver(const RequestOutput& out);

  std::unique_ptr<Engine> engine_;  // used by the engine thread only, after construction
  const EngineConfig config_;
  std::unordered_map<std::string, Callback> callbacks_;  // engine thread only

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_;
  std::vector<std::pair<EngineRequest, Callback>> incoming_;
  std::vector<std::string> aborts_;
  EngineStats stats_;
  Status health_;
  bool accepting_ = true;
  bool stopping_ = false;
  bool abort_in_flight_ = true;
  std::mutex join_mu_;  // serialises shutdown() callers
  std::thread thread_;
};

}  // namespace qs::engine
