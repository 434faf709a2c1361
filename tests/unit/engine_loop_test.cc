// tests: EngineLoop, the thread-safe front: many threads submit at once and abort mid-stream,
// every request gets exactly one final output (never anything after it), the outputs of
// requests left alone equal one-at-a-time runs, bad requests fail at submit, and shutdown
// ends what is in flight and refuses new work.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "../common/engine_runner.h"
#include "engine/engine_loop.h"
#include "model_random_checkpoint.h"
#include "models/model.h"

namespace qs::engine {
namespace {

using qs::testing::Completion;

// Outputs gathered from the engine thread's callbacks.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Completion> done;
  int n_finished = 0;
  int n_late = 0;  // outputs after a request's final one

  EngineLoop::Callback callback() {
    return [this](const RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      Completion& c = done[o.id];
      if (c.finished) {
        ++n_late;
        return;
      }
      qs::testing::accumulate(&done, o);
      if (o.finished) {
        ++n_finished;
        cv.notify_all();
      }
    };
  }
  size_t tokens(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    return done[id].ids.size();
  }
  bool wait_finished(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return n_finished >= n; });
  }
};

// Holds the engine thread inside a callback until the test lets it go, so that the test
// can act at a known point of a request's stream (a real callback must never block).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool reached = false, released = false;

  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu);
    reached = true;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(30), [&] { return released; });
  }
  bool wait_reached() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return reached; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

class EngineLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = qs::testing::fresh_dir(qs::testing::unique_name("engine_loop"));
    qs::testing::write_random_checkpoint(dir, qs::testing::tiny_config("LlamaForCausalLM"));
    auto m = models::Model::load(dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }

  std::vector<int32_t> prompt(uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> len(1, 40), id(0, 96);
    std::vector<int32_t> p(len(rng));
    for (auto& t : p) t = id(rng);
    return p;
  }

  std::unique_ptr<EngineLoop> make_loop(int64_t cache_tokens) {
    EngineConfig c;
    c.max_num_seqs = 8;  // fewer than the submitters' requests: some wait
    auto e = qs::testing::make_engine(*model_, nullptr, {}, loop_pool_, cache_tokens, c);
    return std::make_unique<EngineLoop>(std::move(e));
  }

  std::unique_ptr<models::Model> model_;
  ThreadPool loop_pool_{2};  // driven by the engine thread only
};

TEST_F(EngineLoopTest, ManySubmittersAbortsAndShutdown) {
  auto loop = make_loop(2048);
  Sink sink;
  constexpr int kThreads = 6, kPerThread = 5;
  std::vector<EngineRequest> sent;
  std::mutex sent_mu;
  std::atomic<int> submit_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kPerThread; ++j) {
        EngineRequest r = qs::testing::greedy_request(
            "t" + std::to_string(t) + "-" + std::to_string(j), prompt(t * 100 + j), 12);
        const bool abort_me = j == 2;
        if (abort_me) {
          r.params.max_tokens = 200;
          r.params.ignore_eos = true;
        }
        // A request to abort stops the engine thread after its second token until this
        // thread has called abort(): the abort lands mid-stream, whatever the timing.
        auto gate = std::make_shared<Gate>();
        EngineLoop::Callback cb = sink.callback();
        if (abort_me) {
          cb = [cb, gate, n = 0](const RequestOutput& o) mutable {
            cb(o);
            n += static_cast<int>(o.new_token_ids.size());
            if (n >= 2 && !gate->reached) gate->arrive_and_wait();
          };
        }
        if (!loop->submit(r, cb).ok()) ++submit_errors;
        {
          std::lock_guard<std::mutex> lock(sent_mu);
          sent.push_back(r);
        }
        if (abort_me) {
          EXPECT_TRUE(gate->wait_reached()) << r.id;
          loop->abort(r.id);
          gate->release();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(submit_errors.load(), 0);
  ASSERT_TRUE(sink.wait_finished(kThreads * kPerThread));

  EngineConfig solo_config;
  solo_config.enable_prefix_caching = false;
  ThreadPool solo_pool(1);
  for (const EngineRequest& r : sent) {
    const Completion& got = sink.done[r.id];
    EXPECT_TRUE(got.error.ok()) << r.id << ": " << got.error.to_string();
    if (r.params.max_tokens == 200) {
      EXPECT_EQ(got.finish_reason, "abort") << r.id;
      EXPECT_EQ(got.ids.size(), 2u) << r.id;  // aborted before its next step
      continue;
    }
    auto e = qs::testing::make_engine(*model_, nullptr, {}, solo_pool, 256, solo_config);
    ASSERT_TRUE(e->add_request(r).ok());
    EXPECT_EQ(got.ids, qs::testing::run_to_completion(*e)[r.id].ids) << r.id;
    EXPECT_EQ(got.finish_reason, "length") << r.id;
  }
  const EngineStats st = loop->stats();
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.finished_abort, kThreads);
  EXPECT_EQ(st.finished_length, kThreads * (kPerThread - 1));

  // Shutdown with requests in flight: each gets its final "abort"; then nothing is accepted.
  for (int i = 0; i < 4; ++i) {
    EngineRequest r = qs::testing::greedy_request("late" + std::to_string(i), prompt(i), 200);
    r.params.ignore_eos = true;
    ASSERT_TRUE(loop->submit(r, sink.callback()).ok());
  }
  loop->shutdown();
  EXPECT_EQ(sink.n_finished, kThreads * kPerThread + 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sink.done["late" + std::to_string(i)].finish_reason, "abort");
  }
  EXPECT_FALSE(loop->submit(qs::testing::greedy_request("after", {1}, 1), sink.callback()).ok());
  loop->shutdown();  // idempotent
  EXPECT_EQ(sink.n_late, 0);
}

TEST_F(EngineLoopTest, BadRequestsFailAtSubmitOrThroughTheirCallback) {
  auto loop = make_loop(512);
  Sink sink;
  // Invalid parameters or prompt: refused at once, nothing queued.
  EXPECT_EQ(loop->submit(qs::testing::greedy_request("empty", {}, 4), sink.callback()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(loop->submit(qs::testing::greedy_request("oov", {1, 97}, 4), sink.callback()).code(),
            StatusCode::kInvalidArgument);
  // A duplicate of an id in flight is only known on the engine thread: its callback says so
  // and the first request is untouched. Both are submitted while the engine thread is held in
  // another request's callback, so the first cannot have finished before the second arrives.
  Gate gate;
  ASSERT_TRUE(loop->submit(qs::testing::greedy_request("gate", prompt(2), 1),
                           [&](const RequestOutput&) { gate.arrive_and_wait(); })
                  .ok());
  ASSERT_TRUE(gate.wait_reached());
  EngineRequest first = qs::testing::greedy_request("dup", prompt(1), 50);
  Sink dup_sink;
  ASSERT_TRUE(loop->submit(first, sink.callback()).ok());
  ASSERT_TRUE(loop->submit(first, dup_sink.callback()).ok());
  gate.release();
  ASSERT_TRUE(dup_sink.wait_finished(1));
  EXPECT_FALSE(dup_sink.done["dup"].error.ok());
  EXPECT_NE(dup_sink.done["dup"].error.message().find("already in use"), std::string::npos);
  ASSERT_TRUE(sink.wait_finished(1));
  EXPECT_TRUE(sink.done["dup"].error.ok());
  EXPECT_EQ(sink.done["dup"].finish_reason, "length");
  EXPECT_EQ(sink.done["dup"].ids.size(), 50u);
  loop->shutdown(/*abort_in_flight=*/false);
}

// With abort_in_flight false, shutdown lets running requests finish first.
TEST_F(EngineLoopTest, ShutdownCanFinishWhatIsInFlight) {
  auto loop = make_loop(512);
  Sink sink;
  EngineRequest r = qs::testing::greedy_request("r", prompt(3), 30);
  r.params.ignore_eos = true;
  ASSERT_TRUE(loop->submit(r, sink.callback()).ok());
  loop->shutdown(/*abort_in_flight=*/false);
  EXPECT_EQ(sink.n_finished, 1);
  EXPECT_EQ(sink.done["r"].finish_reason, "length");
  EXPECT_EQ(sink.done["r"].ids.size(), 30u);
}

}  // namespace
}  // namespace qs::engine
