// server: the GenerationBackend the server runs on, over engine::EngineLoop. The loop's engine
// thread alone runs the model; HTTP threads only submit, abort and read stats through it.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/engine_loop.h"
#include "server/backend.h"

namespace qs::server {

class EngineBackend : public GenerationBackend {
 public:
  // Takes the engine and starts its thread (engine::EngineLoop).
  explicit EngineBackend(std::unique_ptr<engine::Engine> engine);
  ~EngineBackend() override;

  Status submit(EngineRequest request, OutputCallback on_output) override;
  void abort(const std::string& id) override;
  EngineStats stats() const override;
  // False once stopped, or once the engine cannot run any more (a tensor-parallel rank died or
  // stopped answering): /health answers 503 and waiting requests fail.
  bool healthy() const override { return !stopped_.load() && loop_.health().ok(); }
  Status health() const { return loop_.health(); }
  // Aborts what is still queued or running and joins the engine thread.
  void shutdown() override;

 private:
  engine::EngineLoop loop_;
  std::atomic<bool> stopped_{false};
};

}  // namespace qs::server
