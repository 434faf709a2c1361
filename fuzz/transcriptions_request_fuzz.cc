// fuzz: POST /v1/audio/transcriptions as a client sends it, through the whole server: the
// input is a Content-Type header and a body (split at kSeparator; an empty header part means
// multipart/form-data with the boundary "qsfuzz"), posted over loopback to a server on the
// tiny random Whisper fixture (2 s windows). cpp-httplib parses the multipart form (Debian's
// library, not instrumented), then our form parser, the sound-file reader and the
// transcriber run. Every answer must be a 200 in the asked format or an error envelope with a
// 4xx status, and the server must still answer /health: no crash, no hang, no 5xx.
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "audio/transcribe.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "fuzz_util.h"
#include "server/audio_backend.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace {

struct LoopbackServer {
  qs::server::ModelInfo info;
  qs::ThreadPool pool{1};
  std::unique_ptr<qs::server::AudioBackend> backend;
  std::unique_ptr<qs::server::ServerMetrics> metrics;
  std::unique_ptr<qs::server::HttpServer> http;
  int port = 0;

  LoopbackServer() {
    auto w = qs::audio::WhisperTranscriber::load(QS_SOURCE_DIR
                                                 "/tests/golden/fixtures/whisper/tiny_random");
    QS_CHECK(w.ok());
    info.served_model_name = "whisper";
    backend = std::make_unique<qs::server::AudioBackend>(std::move(*w), pool);
    metrics = std::make_unique<qs::server::ServerMetrics>(info.served_model_name, 0);
    qs::server::ServerOptions options;
    options.port = 0;
    options.http_threads = 4;
    options.max_audio_seconds = 5.0;
    http = std::make_unique<qs::server::HttpServer>(options, info, *backend, *metrics);
    auto p = http->bind();
    QS_CHECK(p.ok());
    port = *p;
    std::thread([this] { (void)http->serve(); }).detach();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static LoopbackServer* server = new LoopbackServer();  // lives for the whole run
  const std::vector<std::string> parts = qs::fuzz::split(data, size, 2);
  std::string content_type = parts[0];
  if (content_type.empty()) content_type = "multipart/form-data; boundary=qsfuzz";
  // A header value cannot hold line breaks; the client would refuse to send one.
  for (char& c : content_type) {
    if (c == '\r' || c == '\n' || c == '\0') c = ' ';
  }
  httplib::Client client("127.0.0.1", server->port);
  client.set_read_timeout(60, 0);
  auto res = client.Post("/v1/audio/transcriptions", parts[1], content_type.c_str());
  QS_CHECK_MSG(res, "no answer from the server");
  QS_CHECK_MSG(res->status == 200 || (res->status >= 400 && res->status < 500),
               std::to_string(res->status).c_str());
  if (res->status != 200) {
    const auto j = nlohmann::json::parse(res->body, nullptr, false);
    QS_CHECK(j.is_object() && j.contains("error"));
  }
  auto health = client.Get("/health");
  QS_CHECK(health && health->status == 200);
  return 0;
}
