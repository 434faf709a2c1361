// tests: the data-parallel front end in-process over scripted replicas (plain cpp-httplib
// servers that answer, stream, or fail on cue): streams relayed whole, a replica that fails
// before any byte retried on another, a stream cut mid-way ended by an error event and no
// [DONE], 503 and an unhealthy /health with no replica left, the replicas' metrics merged.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/dp_front.h"

namespace qs::server {
namespace {

using namespace std::chrono_literals;

constexpr const char* kEvent = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n";

enum class Mode {
  kAnswer,           // a JSON body naming the replica
  kStream,           // two events and [DONE]
  kCutStream,        // one event, then (later) half of one, and the connection drops
  kDropBeforeBytes,  // headers, then the connection drops before any body byte
};

class FakeReplica {
 public:
  FakeReplica(int index, Mode mode) : index_(index), mode_(mode) {
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = health_.load();
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          "# HELP fake_requests Requests.\n# TYPE fake_requests counter\n"
          "fake_requests_total{model_name=\"m\"} " +
              std::to_string(served_.load()) + ".0\n",
          "text/plain");
    });
    server_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      ++served_;
      switch (mode_) {
        case Mode::kAnswer:
          res.set_content("{\"replica\":" + std::to_string(index_) + "}", "application/json");
          return;
        case Mode::kStream:
          res.set_chunked_content_provider("text/event-stream",
                                           [](size_t, httplib::DataSink& sink) {
                                             sink.write(kEvent, std::strlen(kEvent));
                                             sink.write(kEvent, std::strlen(kEvent));
                                             sink.write("data: [DONE]\n\n", 14);
                                             sink.done();
                                             return true;
                                           });
          return;
        case Mode::kCutStream:
          res.set_chunked_content_provider("text/event-stream",
                                           [](size_t, httplib::DataSink& sink) {
                                             sink.write(kEvent, std::strlen(kEvent));
                                             // Time for the front to relay the first event:
                                             // a failure before that is retried instead.
                                             std::this_thread::sleep_for(300ms);
                                             // Half an event, then the replica is gone.
                                             sink.write("data: {\"choi", 12);
                                             return false;
                                           });
          return;
        case Mode::kDropBeforeBytes:
          res.set_chunked_content_provider("text/event-stream",
                                           [](size_t, httplib::DataSink&) { return false; });
          return;
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() does nothing before the listener runs.
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakeReplica() { stop(); }
  void stop() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  ReplicaAddress address() const { return {"127.0.0.1", port_}; }
  int served() const { return served_; }
  void set_health(int status) { health_ = status; }

 private:
  const int index_;
  const Mode mode_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> served_{0};
  std::atomic<int> health_{200};
};

class Front {
 public:
  explicit Front(std::vector<ReplicaAddress> replicas) {
    DpFrontOptions o;
    o.port = 0;
    o.served_model_name = "m";
    o.health_interval = 50ms;
    front_ = std::make_unique<DpFront>(o, std::move(replicas), nullptr, nullptr);
    Result<int> port = front_->bind();
    EXPECT_TRUE(port.ok());
    port_ = port.ok() ? *port : 0;
    thread_ = std::thread([this] { EXPECT_TRUE(front_->serve().ok()); });
  }
  ~Front() {
    front_->stop();
    thread_.join();
  }

  httplib::Result post(const std::string& body = "{\"prompt\":\"x\"}") {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10s);
    return c.Post("/v1/completions", body, "application/json");
  }
  httplib::Result get(const std::string& path) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10s);
    return c.Get(path.c_str());
  }

 private:
  std::unique_ptr<DpFront> front_;
  std::thread thread_;
  int port_ = 0;
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DpFrontTest, AnswersAndStreamsAreRelayed) {
  FakeReplica a(0, Mode::kAnswer), b(1, Mode::kStream);
  Front front({a.address(), b.address()});
  httplib::Result r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"replica\":0}");
  EXPECT_FALSE(r->get_header_value("X-Request-Id").empty());
  // Replica 0 out of routing (its /health fails): the next request streams from replica 1.
  a.set_health(503);
  std::this_thread::sleep_for(200ms);
  r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(count(r->body, kEvent), 2);
  EXPECT_EQ(count(r->body, "data: [DONE]"), 1);
  ASSERT_TRUE(front.get("/health"));
  EXPECT_EQ(front.get("/health")->status, 200);
}

TEST(DpFrontTest, AReplicaThatFailsBeforeAnyByteIsRetriedOnAnother) {
  FakeReplica a(0, Mode::kDropBeforeBytes), b(1, Mode::kAnswer);
  Front front({a.address(), b.address()});
  httplib::Result r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{\"replica\":1}");
  EXPECT_EQ(a.served(), 1);
  EXPECT_EQ(b.served(), 1);
}

TEST(DpFrontTest, AReplicaThatIsNotListeningIsSkipped) {
  FakeReplica a(0, Mode::kAnswer), b(1, Mode::kAnswer);
  a.stop();
  Front front({a.address(), b.address()});
  for (int i = 0; i < 3; ++i) {
    httplib::Result r = front.post();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "{\"replica\":1}");
  }
}

TEST(DpFrontTest, AStreamCutMidwayEndsWithAnErrorEventAndNoDone) {
  FakeReplica a(0, Mode::kCutStream), b(1, Mode::kCutStream);
  Front front({a.address(), b.address()});
  httplib::Result r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // The whole first event, never the half one; then the error; never [DONE].
  EXPECT_EQ(r->body.rfind(kEvent, 0), 0u) << r->body;
  EXPECT_EQ(count(r->body, "data: {\"choi"), 1) << r->body;
  EXPECT_EQ(count(r->body, "\"error\""), 1) << r->body;
  EXPECT_NE(r->body.find("\"code\":503"), std::string::npos) << r->body;
  EXPECT_EQ(count(r->body, "[DONE]"), 0) << r->body;
  // Bytes had reached the client: no retry on the other replica.
  EXPECT_EQ(a.served() + b.served(), 1);
}

TEST(DpFrontTest, NoReplicaLeftIs503) {
  FakeReplica a(0, Mode::kAnswer), b(1, Mode::kAnswer);
  Front front({a.address(), b.address()});
  a.set_health(503);
  b.stop();
  bool unhealthy = false;
  for (int i = 0; i < 100 && !unhealthy; ++i) {
    std::this_thread::sleep_for(20ms);
    httplib::Result h = front.get("/health");
    unhealthy = h && h->status == 503;
  }
  EXPECT_TRUE(unhealthy);
  httplib::Result r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("No engine replica is available."), std::string::npos) << r->body;
  // Back when it answers /health again.
  a.set_health(200);
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    std::this_thread::sleep_for(20ms);
    httplib::Result h = front.get("/health");
    back = h && h->status == 200;
  }
  EXPECT_TRUE(back);
  r = front.post();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(DpFrontTest, MetricsCarryEachReplicaAndTheRouter) {
  FakeReplica a(0, Mode::kAnswer), b(1, Mode::kAnswer);
  Front front({a.address(), b.address()});
  ASSERT_TRUE(front.post());
  httplib::Result m = front.get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(count(m->body, "# TYPE fake_requests counter"), 1) << m->body;
  EXPECT_NE(m->body.find("fake_requests_total{replica=\"0\",model_name=\"m\"} 1.0"),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("fake_requests_total{replica=\"1\",model_name=\"m\"} 0.0"),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("quantserve:dp_requests_routed_total{model_name=\"m\",replica=\"0\"} 1.0"),
            std::string::npos)
      << m->body;
}

TEST(DpFrontTest, UnknownPathsGetTheErrorEnvelope) {
  FakeReplica a(0, Mode::kAnswer);
  Front front({a.address()});
  httplib::Result r = front.get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("NotFoundError"), std::string::npos);
}

}  // namespace
}  // namespace qs::server
