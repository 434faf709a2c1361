// unit: the HTTP task queue (server/http_task_queue.h): threads start only as concurrency
// needs them, up to the cap; a job goes to the thread that went idle last; every job runs,
// those still queued at shutdown included.
#include "server/http_task_queue.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace qs::server {
namespace {

// Blocks callers until `count` of them have arrived (the jobs' own barrier).
class Gate {
 public:
  explicit Gate(int count) : left_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--left_ <= 0) cv_.notify_all();
    cv_.wait(lock, [&] { return left_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

// Waits until `done` reaches `want` and `idle` threads wait for work again (a job counts
// itself done just before its thread goes back to the queue).
void wait_for(const HttpTaskQueue& q, const std::atomic<int>& done, int want, size_t idle) {
  while (done.load() < want || q.idle_threads() < idle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(HttpTaskQueue, StartsNoThreadUntilAJobComes) {
  HttpTaskQueue q(272);
  EXPECT_EQ(q.threads_started(), 0u);
}

TEST(HttpTaskQueue, JobsOneAfterAnotherRunOnOneThread) {
  HttpTaskQueue q(272);
  std::atomic<int> done{0};
  std::set<std::thread::id> ids;
  std::mutex ids_mu;
  for (int i = 0; i < 200; ++i) {
    q.enqueue([&] {
      std::lock_guard<std::mutex> lock(ids_mu);
      ids.insert(std::this_thread::get_id());
      ++done;
    });
    wait_for(q, done, i + 1, 1);
  }
  EXPECT_EQ(q.threads_started(), 1u);
  EXPECT_EQ(ids.size(), 1u);
}

TEST(HttpTaskQueue, ConcurrentJobsGetTheirOwnThreadsAndNoMore) {
  HttpTaskQueue q(272);
  constexpr int kJobs = 12;
  for (int round = 0; round < 3; ++round) {
    // All twelve must be running at once to pass the gate: twelve threads, reused later.
    Gate gate(kJobs);
    std::atomic<int> done{0};
    for (int i = 0; i < kJobs; ++i) {
      q.enqueue([&] {
        gate.arrive_and_wait();
        ++done;
      });
    }
    wait_for(q, done, kJobs, kJobs);
    EXPECT_EQ(q.threads_started(), static_cast<size_t>(kJobs)) << "round " << round;
  }
}

TEST(HttpTaskQueue, TheCapQueuesTheRest) {
  HttpTaskQueue q(2);
  std::atomic<int> done{0}, running{0}, most{0};
  std::atomic<bool> release{false};
  for (int i = 0; i < 50; ++i) {
    q.enqueue([&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
      --running;
      ++done;
    });
  }
  // Two jobs hold both threads; the other 48 wait in the queue, no third thread.
  while (running.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(q.threads_started(), 2u);
  EXPECT_EQ(done.load(), 0);
  release = true;
  wait_for(q, done, 50, 2);
  EXPECT_EQ(q.threads_started(), 2u);
  EXPECT_EQ(most.load(), 2);
}

TEST(HttpTaskQueue, ShutdownRunsWhatIsQueuedAndJoins) {
  std::atomic<int> done{0};
  {
    HttpTaskQueue q(1);
    for (int i = 0; i < 20; ++i) {
      q.enqueue([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ++done;
      });
    }
    q.shutdown();
    EXPECT_EQ(done.load(), 20);
    q.shutdown();  // a second call (and the destructor's) does nothing
  }
  EXPECT_EQ(done.load(), 20);
}

}  // namespace
}  // namespace qs::server
