// tests: the HTTP server in-process on 127.0.0.1 over a scripted backend (one token every
// few milliseconds, no model): response assembly for n > 1, SSE streams, API keys, error
// envelopes for unknown paths, a client that hangs up mid-stream (its request must be
// aborted) and shutdown with a stream in flight (the stream ends with "abort" and [DONE]).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "server/http_server.h"
#include "server_test_model.h"

namespace qs::server {
namespace {

using namespace std::chrono_literals;
using qs::testing::ServerTestModel;

// Emits the token 'a' every `interval` until max_tokens, or "abort" once aborted.
class ScriptedBackend : public GenerationBackend {
 public:
  explicit ScriptedBackend(std::chrono::milliseconds interval) : interval_(interval) {}
  ~ScriptedBackend() override { shutdown(); }

  Status submit(EngineRequest request, OutputCallback on_output) override {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([this, request = std::move(request), on_output] {
      for (int32_t k = 0; k < request.params.max_tokens; ++k) {
        std::unique_lock<std::mutex> wait_lock(mu_);
        if (cv_.wait_for(wait_lock, interval_, [&] { return aborted_.count(request.id) > 0; })) {
          wait_lock.unlock();
          RequestOutput out;
          out.id = request.id;
          out.finished = true;
          out.finish_reason = "abort";
          on_output(std::move(out));
          return;
        }
        wait_lock.unlock();
        RequestOutput out;
        out.id = request.id;
        out.new_token_ids = {ServerTestModel::id('a')};
        out.new_text = "a";
        out.finished = k + 1 == request.params.max_tokens;
        if (out.finished) out.finish_reason = "length";
        on_output(std::move(out));
      }
    });
    return ok_status();
  }
  void abort(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.insert(id);
    cv_.notify_all();
  }
  EngineStats stats() const override { return EngineStats(); }
  bool healthy() const override { return true; }
  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  size_t n_aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_.size();
  }

 private:
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> aborted_;
  std::vector<std::thread> threads_;
};

class ServerHttpTest : public ::testing::Test {
 protected:
  void start(std::chrono::milliseconds interval, std::string api_key = "") {
    backend_ = std::make_unique<ScriptedBackend>(interval);
    metrics_ = std::make_unique<ServerMetrics>("tiny", 32);
    ServerOptions options;
    options.port = 0;
    options.api_key = std::move(api_key);
    http_ = std::make_unique<HttpServer>(options, model_.info, *backend_, *metrics_);
    auto port = http_->bind();
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    serving_ = std::thread([this] { EXPECT_TRUE(http_->serve().ok()); });
  }
  void TearDown() override {
    if (http_) http_->shutdown();
    if (serving_.joinable()) serving_.join();
    if (backend_) backend_->shutdown();
  }

  // A streaming POST on a bare socket, returned once the first event has arrived.
  int open_stream(const std::string& body, std::string* received) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    EXPECT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    while (received->find("data: ") == std::string::npos) {
      if (!read_some(fd, received)) break;
    }
    return fd;
  }
  static bool read_some(int fd, std::string* received) {
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    received->append(buf, static_cast<size_t>(n));
    return true;
  }

  ServerTestModel model_;
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<HttpServer> http_;
  std::thread serving_;
  int port_ = 0;
};

TEST_F(ServerHttpTest, NonStreamingChoicesAndUsage) {
  start(0ms);
  httplib::Client cli("127.0.0.1", port_);
  auto res = cli.Post("/v1/completions", R"({"prompt": "ab", "max_tokens": 3, "n": 2})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "aaa");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);  // one prompt, counted once
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ("cmpl-" + res->get_header_value("X-Request-Id"), j["id"].get<std::string>());
}

TEST_F(ServerHttpTest, StreamEndsWithUsageAndDone) {
  start(0ms);
  httplib::Client cli("127.0.0.1", port_);
  auto res =
      cli.Post("/v1/chat/completions",
               R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": true,
          "stream_options": {"include_usage": true}})",
               "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::vector<Json> events;
  size_t pos = 0;
  const std::string& body = res->body;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string event = body.substr(pos, end - pos);
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    pos = end + 2;
    if (event == "data: [DONE]") {
      EXPECT_EQ(pos, body.size());
      break;
    }
    events.push_back(Json::parse(event.substr(6)));
  }
  ASSERT_EQ(events.size(), 4u);  // role, two tokens, usage
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events[3]["choices"].empty());
  EXPECT_EQ(events[3]["usage"]["completion_tokens"], 2);
}

TEST_F(ServerHttpTest, ApiKeyGuardsV1Only) {
  start(0ms, "k3y");
  httplib::Client cli("127.0.0.1", port_);
  auto denied = cli.Get("/v1/models");
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(Json::parse(denied->body)["error"]["code"], 401);
  auto allowed = cli.Get("/v1/models", {{"Authorization", "Bearer k3y"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200);
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto missing = cli.Get("/nowhere");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(Json::parse(missing->body)["error"]["type"], "NotFoundError");
}

TEST_F(ServerHttpTest, ClientHangingUpAbortsItsRequest) {
  start(5ms);
  std::string received;
  int fd = open_stream(R"({"prompt": "a", "max_tokens": 30, "stream": true})", &received);
  ASSERT_NE(received.find("data: "), std::string::npos);
  close(fd);
  // 30 tokens take 150 ms; the abort must come well before the request could finish.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (backend_->n_aborted() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(backend_->n_aborted(), 1u);
}

TEST_F(ServerHttpTest, ShutdownEndsStreamsInFlight) {
  start(20ms);
  std::string received;
  int fd = open_stream(R"({"prompt": "a", "max_tokens": 30, "stream": true})", &received);
  std::thread stopper([this] { http_->shutdown(); });
  while (received.find("data: [DONE]") == std::string::npos) {
    if (!read_some(fd, &received)) break;
  }
  close(fd);
  stopper.join();
  EXPECT_NE(received.find("\"finish_reason\":\"abort\""), std::string::npos) << received;
  EXPECT_NE(received.find("data: [DONE]\n\n"), std::string::npos);
  // Later requests are refused: nothing listens any more.
  httplib::Client cli("127.0.0.1", port_);
  EXPECT_FALSE(cli.Get("/health"));
}

}  // namespace
}  // namespace qs::server
