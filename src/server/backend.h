// server: the seam between the HTTP layer and whatever generates tokens. The server submits
// one EngineRequest per choice and receives RequestOutputs on a callback from the engine
// thread; it never runs model code itself. engine_backend.h implements it over
// engine::EngineLoop; tests implement it with scripted outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace qs::server {

// The engine's own request, output and stats types: the seam adds an interface, not copies.
using engine::EngineRequest;
using engine::EngineStats;
using engine::RequestOutput;
using engine::SampleLogprobs;

// Called from the engine thread, in order, once per update of one request. It must not
// block for long: it hands the output to the HTTP thread waiting for it.
using OutputCallback = std::function<void(RequestOutput)>;

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Queues a request. An error here (parameters this engine cannot honour) means no
  // callback will ever come; otherwise callbacks come until one has finished = true.
  virtual Status submit(EngineRequest request, OutputCallback on_output) = 0;
  // Ends a request early (client gone, server shutting down): its last update says
  // finish_reason "abort" unless it had already finished. Unknown ids are ignored.
  virtual void abort(const std::string& id) = 0;
  virtual EngineStats stats() const = 0;
  // False once the engine thread has died; /health then answers 503.
  virtual bool healthy() const = 0;
  // Aborts everything still queued or running and joins the engine thread.
  virtual void shutdown() = 0;
};

}  // namespace qs::server
