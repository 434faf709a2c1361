// server: routes, authentication, access log and shutdown (see http_server.h).
#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>

#include "core/log.h"
#include "server/http_envelope.h"
#include "server/http_task_queue.h"
#include "server/openai_response.h"

#ifndef QS_VERSION
#define QS_VERSION "unknown"
#endif

namespace qs::server {
namespace {

// Bodies past this are refused (413) before they are read into memory.
constexpr size_t kMaxBodyBytes = 64u << 20;
// How long shutdown waits for aborted requests to send their last bytes.
constexpr std::chrono::milliseconds kDrainTimeout{10000};

bool authorized(const httplib::Request& req, const std::string& api_key) {
  return req.get_header_value("Authorization") == "Bearer " + api_key;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options, const ModelInfo& model, GenerationBackend& backend,
                       ServerMetrics& metrics)
    : options_(std::move(options)),
      model_(model),
      backend_(&backend),
      metrics_(metrics),
      generation_(std::make_unique<GenerationHandler>(model, backend, metrics, inflight_,
                                                      options_.enable_prompt_tokens_details)),
      http_(std::make_unique<httplib::Server>()),
      started_(static_cast<int64_t>(std::time(nullptr))) {
  install_routes();
}

HttpServer::HttpServer(ServerOptions options, const ModelInfo& model, ImageBackend& images,
                       ServerMetrics& metrics)
    : options_(std::move(options)),
      model_(model),
      images_(&images),
      metrics_(metrics),
      images_handler_(std::make_unique<ImagesHandler>(model, images, inflight_)),
      http_(std::make_unique<httplib::Server>()),
      started_(static_cast<int64_t>(std::time(nullptr))) {
  install_routes();
}

HttpServer::HttpServer(ServerOptions options, const ModelInfo& model, AudioBackend& audio,
                       ServerMetrics& metrics)
    : options_(std::move(options)),
      model_(model),
      audio_(&audio),
      metrics_(metrics),
      transcriptions_(std::make_unique<TranscriptionsHandler>(model, audio, metrics, inflight_,
                                                              options_.max_audio_seconds)),
      http_(std::make_unique<httplib::Server>()),
      started_(static_cast<int64_t>(std::time(nullptr))) {
  metrics_.enable_transcription_metrics();
  install_routes();
}

HttpServer::HttpServer(ServerOptions options, const ModelInfo& model, VideoBackend& videos,
                       ServerMetrics& metrics)
    : options_(std::move(options)),
      model_(model),
      videos_(&videos),
      metrics_(metrics),
      videos_handler_(std::make_unique<VideosHandler>(model, videos, inflight_)),
      http_(std::make_unique<httplib::Server>()),
      started_(static_cast<int64_t>(std::time(nullptr))) {
  install_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::install_routes() {
  httplib::Server& s = *http_;
  const int n_threads = std::max(options_.http_threads, 4);
  s.new_task_queue = [n_threads] { return new HttpTaskQueue(static_cast<size_t>(n_threads)); };
  s.set_payload_max_length(kMaxBodyBytes);

  // Every request: an id, and the API key check on /v1/*.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    assign_request_id(req, res);
    const bool protected_path = req.path == "/v1" || req.path.rfind("/v1/", 0) == 0;
    if (!options_.api_key.empty() && protected_path && !authorized(req, options_.api_key)) {
      send_error(res, unauthorized());
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  install_error_envelope_and_access_log(s);

  auto generate = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      if (draining_) return send_error(res, service_unavailable("The server is shutting down."));
      if (!generation_) {
        // vLLM's answer where the model has no handler for the endpoint.
        return send_error(res, bad_request(endpoint == Endpoint::kChat
                                               ? "The model does not support Chat Completions API"
                                               : "The model does not support Completions API"));
      }
      generation_->handle(endpoint, req, res, res.get_header_value(kRequestIdHeader));
    };
  };
  s.Post("/v1/completions", generate(Endpoint::kCompletions));
  s.Post("/v1/chat/completions", generate(Endpoint::kChat));
  s.Post("/v1/images/generations", [this](const httplib::Request& req, httplib::Response& res) {
    if (draining_) return send_error(res, service_unavailable("The server is shutting down."));
    if (!images_handler_) {
      return send_error(res, service_unavailable("Diffusion engine not initialized. Start server "
                                                 "with a diffusion model."));
    }
    images_handler_->handle(req, res, res.get_header_value(kRequestIdHeader));
  });
  s.Post("/v1/audio/transcriptions", [this](const httplib::Request& req, httplib::Response& res) {
    if (draining_) return send_error(res, service_unavailable("The server is shutting down."));
    if (!transcriptions_) {
      return send_error(res, bad_request("The model does not support Transcriptions API"));
    }
    transcriptions_->handle(req, res, res.get_header_value(kRequestIdHeader));
  });
  // vLLM-Omni's videos API. A job id is one path segment; httplib 0.11 routes by regex.
  auto videos = [this](auto method) {
    return [this, method](const httplib::Request& req, httplib::Response& res) {
      if (draining_) return send_error(res, service_unavailable("The server is shutting down."));
      if (!videos_handler_) {
        return send_error(res, service_unavailable("Video generation handler not initialized."));
      }
      method(*videos_handler_, req, res);
    };
  };
  s.Post("/v1/videos/sync",
         videos([](VideosHandler& h, const httplib::Request& req, httplib::Response& res) {
           h.create_sync(req, res, res.get_header_value(kRequestIdHeader));
         }));
  s.Post("/v1/videos",
         videos([](VideosHandler& h, const httplib::Request& req, httplib::Response& res) {
           h.create(req, res, res.get_header_value(kRequestIdHeader));
         }));
  s.Get("/v1/videos", videos([](VideosHandler& h, const httplib::Request& req,
                                httplib::Response& res) { h.list(req, res); }));
  s.Get(R"(/v1/videos/([^/]+)/content)",
        videos([](VideosHandler& h, const httplib::Request& req, httplib::Response& res) {
          h.content(req.matches[1].str(), res);
        }));
  s.Get(R"(/v1/videos/([^/]+))",
        videos([](VideosHandler& h, const httplib::Request& req, httplib::Response& res) {
          h.retrieve(req.matches[1].str(), res);
        }));
  s.Delete(R"(/v1/videos/([^/]+))",
           videos([](VideosHandler& h, const httplib::Request& req, httplib::Response& res) {
             h.remove(req.matches[1].str(), res);
           }));
  // Tokenizer endpoints need the LLM's tokenizer.
  auto no_tokenizer = [this](httplib::Response& res) {
    if (model_.tokenizer) return false;
    send_error(res, bad_request("The model does not support Tokenization API"));
    return true;
  };

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_wire(models_response(model_, started_)), "application/json");
  });
  s.Post("/tokenize", [this, no_tokenizer](const httplib::Request& req, httplib::Response& res) {
    if (no_tokenizer(res)) return;
    TokenizeRequest t;
    if (auto e = parse_tokenize_request(req.body, model_, &t)) return send_error(res, *e);
    res.set_content(to_wire(tokenize_response(t.ids, t.return_token_strs, model_)),
                    "application/json");
  });
  s.Post("/detokenize", [this, no_tokenizer](const httplib::Request& req, httplib::Response& res) {
    if (no_tokenizer(res)) return;
    DetokenizeRequest d;
    if (auto e = parse_detokenize_request(req.body, model_, &d)) return send_error(res, *e);
    const std::string text = model_.tokenizer->decode(d.ids, /*skip_special=*/true);
    res.set_content(to_wire(Json{{"prompt", text}}), "application/json");
  });
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    // vLLM: 200 with an empty body while the engine lives, 503 once it has died.
    const bool healthy = backend_  ? backend_->healthy()
                         : images_ ? images_->healthy()
                         : videos_ ? videos_->healthy()
                                   : audio_->healthy();
    res.status = healthy ? 200 : 503;
    if (res.status != 200) send_error(res, service_unavailable("The engine is not running."));
  };
  s.Get("/health", health);
  s.Get("/ping", health);
  s.Post("/ping", health);
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_wire(Json{{"version", QS_VERSION}}), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    if (backend_) metrics_.set_engine_stats(backend_->stats());
    res.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

Result<int> HttpServer::bind() {
  return bind_listener(*http_, options_.host, options_.port);
}

Status HttpServer::serve() {
  if (!http_->listen_after_bind() && !draining_) {
    return io_error("the HTTP listener stopped unexpectedly");
  }
  return ok_status();
}

void HttpServer::shutdown() {
  if (draining_.exchange(true)) return;
  // New generation requests now get 503; everything in flight ends with "abort" and its
  // response (stream or body) is completed before the listener goes.
  if (backend_) {
    for (const std::string& id : inflight_.ids()) backend_->abort(id);
  } else if (images_) {
    images_->cancel_all();
  } else if (videos_) {
    videos_->cancel_all();
  } else {
    audio_->cancel_all();
  }
  if (!inflight_.wait_empty(kDrainTimeout)) {
    QS_LOG_WARN("shutdown: requests still in flight after %lld ms; closing anyway",
                static_cast<long long>(kDrainTimeout.count()));
  }
  http_->stop();
}

}  // namespace qs::server
