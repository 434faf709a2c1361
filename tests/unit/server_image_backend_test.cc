// tests: the image engine thread over the tiny FLUX.1 fixture: jobs finish in the order they
// were queued, a job cancelled while queued never runs, one cancelled while running stops
// after its current step, and shutdown ends everything still queued with a callback.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/image_backend.h"

namespace qs::server {
namespace {

constexpr const char* kPipeline = QS_SOURCE_DIR "/tests/golden/fixtures/flux/tiny_pipeline";

// What the callbacks saw, in the order the engine thread called them.
struct Log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;  // "name:ok" or "name:<error message>"

  ImageCallback callback(const std::string& name) {
    return [this, name](Result<std::vector<diffusion::DiffusionOutput>> r) {
      std::lock_guard<std::mutex> lock(mu);
      done.push_back(name + ":" + (r.ok() ? "ok" : r.status().message()));
      cv.notify_all();
    };
  }
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done.size() >= n; }));
    return done;
  }
};

ImageJob job(int64_t steps, int64_t side = 16, int n = 1) {
  ImageJob j;
  for (int i = 0; i < n; ++i) {
    diffusion::DiffusionRequest r;
    r.prompt = "a cube";
    r.width = r.height = side;
    r.num_inference_steps = steps;
    r.max_sequence_length = 16;
    r.seed = static_cast<uint64_t>(i);
    j.images.push_back(r);
  }
  j.cancelled = std::make_shared<std::atomic<bool>>(false);
  return j;
}

std::unique_ptr<diffusion::DiffusionPipeline> load() {
  auto p = diffusion::load_pipeline(kPipeline);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(*p);
}

TEST(ImageBackendTest, FirstComeFirstServed) {
  ThreadPool pool(1);
  ImageBackend backend(load(), pool);
  Log log;
  // A slow first job, then quick ones: the quick ones still finish after it, in order.
  ASSERT_TRUE(backend.submit(job(20, 64), log.callback("a")).ok());
  ASSERT_TRUE(backend.submit(job(1), log.callback("b")).ok());
  ASSERT_TRUE(backend.submit(job(1, 16, 3), log.callback("c")).ok());
  ASSERT_TRUE(backend.submit(job(2), log.callback("d")).ok());
  EXPECT_EQ(log.wait_for(4), (std::vector<std::string>{"a:ok", "b:ok", "c:ok", "d:ok"}));
}

TEST(ImageBackendTest, ReturnsEveryImageOfAJob) {
  ThreadPool pool(1);
  ImageBackend backend(load(), pool);
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<diffusion::DiffusionOutput>>> got;
  ASSERT_TRUE(backend
                  .submit(job(1, 16, 3),
                          [&](Result<std::vector<diffusion::DiffusionOutput>> r) {
                            std::lock_guard<std::mutex> lock(mu);
                            got = std::move(r);
                            cv.notify_all();
                          })
                  .ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return got.has_value(); }));
  ASSERT_TRUE(got->ok());
  ASSERT_EQ((*got)->size(), 3u);
  EXPECT_NE((**got)[0].rgb, (**got)[1].rgb);  // seeds 0, 1, 2
  EXPECT_EQ((**got)[2].width, 16);
  EXPECT_EQ((**got)[2].frames, 1);
}

TEST(ImageBackendTest, CancelledWhileQueuedNeverRuns) {
  ThreadPool pool(1);
  ImageBackend backend(load(), pool);
  Log log;
  ImageJob first = job(2);
  ImageJob queued = job(1);
  const auto flag = queued.cancelled;
  // The first job holds the engine thread until the queued one has been cancelled.
  first.images[0].on_step = [flag](int64_t, int64_t, const std::vector<float>&) {
    while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  ASSERT_TRUE(backend.submit(std::move(first), log.callback("first")).ok());
  ASSERT_TRUE(backend.submit(std::move(queued), log.callback("queued")).ok());
  flag->store(true);
  EXPECT_EQ(log.wait_for(2),
            (std::vector<std::string>{"first:ok", "queued:cancelled before it started"}));
}

TEST(ImageBackendTest, CancelledWhileRunningStopsBetweenSteps) {
  ThreadPool pool(1);
  ImageBackend backend(load(), pool);
  Log log;
  ImageJob long_job = job(1000, 64);
  const auto flag = long_job.cancelled;
  // Cancel from the step callback itself: after step 3 of 1000.
  long_job.images[0].on_step = [flag](int64_t i, int64_t, const std::vector<float>&) {
    if (i == 2) flag->store(true);
  };
  ASSERT_TRUE(backend.submit(std::move(long_job), log.callback("long")).ok());
  EXPECT_EQ(log.wait_for(1), (std::vector<std::string>{"long:cancelled after step 3/1000"}));
}

TEST(ImageBackendTest, ShutdownEndsEverythingWithACallback) {
  ThreadPool pool(1);
  Log log;
  {
    ImageBackend backend(load(), pool);
    ASSERT_TRUE(backend.submit(job(1000, 64), log.callback("running")).ok());
    ASSERT_TRUE(backend.submit(job(1), log.callback("queued")).ok());
    backend.shutdown();
    EXPECT_FALSE(backend.healthy());
    EXPECT_FALSE(backend.submit(job(1), log.callback("late")).ok());
  }
  const auto done = log.wait_for(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].rfind("running:cancelled", 0), 0u) << done[0];
  EXPECT_EQ(done[1], "queued:cancelled before it started");
}

}  // namespace
}  // namespace qs::server
