// server: EngineBackend, a thin adapter: the HTTP layer's callback takes its output by value
// (it moves it into the stream's event queue), the loop hands out const references.
#include "server/engine_backend.h"

#include <utility>

namespace qs::server {

EngineBackend::EngineBackend(std::unique_ptr<engine::Engine> engine) : loop_(std::move(engine)) {}

EngineBackend::~EngineBackend() {
  shutdown();
}

Status EngineBackend::submit(EngineRequest request, OutputCallback on_output) {
  return loop_.submit(std::move(request),
                      [cb = std::move(on_output)](const RequestOutput& out) { cb(out); });
}

void EngineBackend::abort(const std::string& id) {
  loop_.abort(id);
}

EngineStats EngineBackend::stats() const {
  return loop_.stats();
}

void EngineBackend::shutdown() {
  stopped_.store(true);
  loop_.shutdown(/*abort_in_flight=*/true);
}

}  // namespace qs::server
