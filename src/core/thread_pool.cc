// core: ThreadPool implementation (spin-then-sleep workers, caller participates).
#include "core/thread_pool.h"

#include <algorithm>
#include <utility>

namespace qs {
namespace {

// The spin-wait hint: it lets a sibling hyperthread (or, on aarch64, an SMT or a virtualised
// core) run while this one waits; elsewhere the loop spins plainly.
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// About 50-100 us of spinning before a worker sleeps: longer than the gap between two
// matmuls of one decode step, much shorter than the gap between two requests.
constexpr int kSpinIterations = 20000;
// Spinners yield the core this often. When there are more runnable threads than cores (CI
// running tests in parallel, a loaded host), a pure spinner would hold its core for a whole
// scheduler slice while the thread it waits for cannot run; yielding costs ~1 us otherwise.
constexpr int kYieldEvery = 64;

inline void spin_pause(int iteration) {
  if (iteration % kYieldEvery == kYieldEvery - 1) {
    std::this_thread::yield();
  } else {
    cpu_relax();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      spin_pause(spin);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    // An exception must not leave a worker (std::terminate): the caller rethrows it.
    try {
      (*job_)(index, n_threads_);
    } catch (...) {
      keep_error(std::current_exception());
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    // The lock orders the generation bump against a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) cv_.notify_all();
  // Share 0 may throw too; the workers still hold references into this frame and `fn`, so
  // they are waited for before anything leaves it.
  try {
    fn(0, n_threads_);
  } catch (...) {
    keep_error(std::current_exception());
  }
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) spin_pause(spin);
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::keep_error(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!error_) error_ = std::move(error);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int used = static_cast<int>(std::min<int64_t>(n_threads_, n_chunks));
  if (used == 1) {
    fn(0, n);
    return;
  }
  run([&](int t, int) {
    if (t >= used) return;
    const int64_t begin = n_chunks * t / used * grain;
    const int64_t end = std::min(n, n_chunks * (t + 1) / used * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace qs
