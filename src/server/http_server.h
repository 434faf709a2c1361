// server: the OpenAI-compatible HTTP server on cpp-httplib. Routes: GET /v1/models,
// POST /v1/completions and /v1/chat/completions, POST /tokenize and /detokenize, GET /health
// (and /ping), GET /version, GET /metrics. With an API key, every /v1/* path needs
// `Authorization: Bearer <key>`; the others stay open, as in vLLM. Each request gets an id
// (the client's X-Request-Id, else a random one) echoed in the X-Request-Id header, the
// response id and one access-log line. shutdown() stops accepting work, aborts what is in
// flight, lets those responses end, then stops the listener. A pipeline server (a diffusers
// directory) answers POST /v1/images/generations instead of the text endpoints, which then
// say the model does not support them, as vLLM-Omni's diffusion server; an LLM server answers
// the images endpoint with vLLM-Omni's 503 "Diffusion engine not initialized". A transcription
// server (a Whisper checkpoint) answers POST /v1/audio/transcriptions likewise, and the other
// servers answer that endpoint with vLLM's 400 "The model does not support Transcriptions API".
// A video server (a Wan pipeline directory) answers vLLM-Omni's videos API (POST /v1/videos and
// /v1/videos/sync, GET /v1/videos, GET and DELETE /v1/videos/{id}, GET /v1/videos/{id}/content);
// the other servers answer it with vLLM-Omni's 503 "Video generation handler not initialized".
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/audio_backend.h"
#include "server/backend.h"
#include "server/generation_handler.h"
#include "server/image_backend.h"
#include "server/images_handler.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/transcriptions_handler.h"
#include "server/video_backend.h"
#include "server/videos_handler.h"

namespace httplib {
class Server;
}

namespace qs::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;        // 0: any free port (bind() says which)
  std::string api_key;    // empty: no authentication
  int http_threads = 64;  // concurrent connections served; a stream holds one
  // vLLM's --enable-prompt-tokens-details: usage reports the prefix-cache hit per response.
  bool enable_prompt_tokens_details = false;
  // A transcription server refuses recordings longer than this, from their header.
  double max_audio_seconds = 3600.0;
};

class HttpServer {
 public:
  // All references must outlive the server.
  HttpServer(ServerOptions options, const ModelInfo& model, GenerationBackend& backend,
             ServerMetrics& metrics);
  // A pipeline server: `model` names it (no tokenizer), `images` generates.
  HttpServer(ServerOptions options, const ModelInfo& model, ImageBackend& images,
             ServerMetrics& metrics);
  // A transcription server: `model` names it (no tokenizer), `audio` transcribes.
  HttpServer(ServerOptions options, const ModelInfo& model, AudioBackend& audio,
             ServerMetrics& metrics);
  // A video server: `model` names it (no tokenizer), `videos` generates.
  HttpServer(ServerOptions options, const ModelInfo& model, VideoBackend& videos,
             ServerMetrics& metrics);
  ~HttpServer();

  // Binds the listening socket; returns the port.
  Result<int> bind();
  // Serves until shutdown(); call after bind().
  Status serve();
  // Thread-safe and idempotent; returns once the listener has stopped.
  void shutdown();

 private:
  void install_routes();

  ServerOptions options_;
  const ModelInfo& model_;
  // Exactly one of backend_, images_, audio_, videos_ is set.
  GenerationBackend* backend_ = nullptr;
  ImageBackend* images_ = nullptr;
  AudioBackend* audio_ = nullptr;
  VideoBackend* videos_ = nullptr;
  ServerMetrics& metrics_;
  InflightRequests inflight_;
  std::unique_ptr<GenerationHandler> generation_;
  std::unique_ptr<ImagesHandler> images_handler_;
  std::unique_ptr<TranscriptionsHandler> transcriptions_;
  std::unique_ptr<VideosHandler> videos_handler_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> draining_{false};
  const int64_t started_ = 0;  // unix seconds, the `created` of /v1/models
};

}  // namespace qs::server
