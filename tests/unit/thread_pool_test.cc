// Unit tests for the thread pool: every index is visited exactly once, jobs can be issued
// back to back many times (as decode does), one thread runs inline, and an exception thrown by
// any share (std::bad_alloc from a scratch buffer) reaches the caller instead of terminating.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace qs {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[i]++;
          },
          8);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 5000; ++rep) {
    pool.run([&](int t, int n) { sum += t + 1; });
  }
  EXPECT_EQ(sum.load(), 5000 * 3);
}

// Before ThreadPool caught exceptions, a throw in a worker's share called std::terminate and one
// in the caller's share left the workers running on a destroyed frame.
TEST(ThreadPool, ExceptionFromAnyShareReachesTheCallerAfterAllShares) {
  for (int thrower : {0, 1, 2}) {
    ThreadPool pool(3);
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.run([&](int t, int) {
      if (t == thrower) throw std::bad_alloc();
      finished++;
    }),
                 std::bad_alloc)
        << "share " << thrower;
    EXPECT_EQ(finished.load(), 2) << "the other shares ran to the end first";
    // The pool keeps working, and the error does not come back on the next job.
    std::atomic<int> ran{0};
    pool.run([&](int, int) { ran++; });
    EXPECT_EQ(ran.load(), 3);
  }
}

TEST(ThreadPool, ParallelForRethrowsTheFirstException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t b, int64_t) {
                                   throw std::runtime_error("range at " + std::to_string(b));
                                 }),
               std::runtime_error);
  ThreadPool inline_pool(1);
  EXPECT_THROW(inline_pool.parallel_for(10, [](int64_t, int64_t) { throw std::bad_alloc(); }),
               std::bad_alloc);
}

}  // namespace
}  // namespace qs
