// core: a fixed pool of worker threads for data-parallel kernels. The caller's thread does
// share 0 of every job, so ThreadPool(1) runs everything inline. Workers spin briefly
// before sleeping because decode issues hundreds of small jobs per token and a condvar
// wake-up per job would cost more than the job itself. An exception thrown by any share of a
// job (std::bad_alloc from a scratch buffer) is caught on its thread and rethrown to the
// caller once every share has returned, instead of ending the process in a worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qs {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread and waits for all of them. If shares
  // threw, the first exception caught is rethrown here after all of them have finished.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into one contiguous range per thread (multiples of `grain` except the
  // last) and calls fn(begin, end) for each non-empty range.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // Threads to use when the user does not say: the number of cores.
  static int default_threads();

 private:
  void worker_loop(int index);
  void keep_error(std::exception_ptr error);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  // The first exception a share of the current job threw; written under error_mu_, read by
  // run() after pending_ reaches 0 (whose acquire orders it after every write).
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace qs
