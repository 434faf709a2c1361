// server: the task queue behind cpp-httplib's connections. httplib's own ThreadPool starts all
// of its threads at once and wakes whichever one the condition variable picks, so with the
// max-num-seqs + 16 threads a server needs for its streams, every request lands on a thread
// that may never have run one: each touches its own stack and its own malloc arena, and
// resident memory climbs for as long as untouched threads remain (scripts/soak.py, 2026-12-02:
// +16 MiB against 24 threads, and still rising after minutes). This queue
// starts threads only when no idle one is left (up to the cap) and hands a job to the thread
// that went idle last, so the threads in use, and the memory they touch, follow the peak
// concurrency the server has seen.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace qs::server {

class HttpTaskQueue final : public httplib::TaskQueue {
 public:
  explicit HttpTaskQueue(size_t max_threads);
  ~HttpTaskQueue() override;
  HttpTaskQueue(const HttpTaskQueue&) = delete;
  HttpTaskQueue& operator=(const HttpTaskQueue&) = delete;

  // Runs fn on an idle thread (the most recently idle one), on a new thread while fewer than
  // max_threads exist, or else on the first thread to finish its job.
  void enqueue(std::function<void()> fn) override;
  // Runs the jobs still queued, then joins every thread. Idempotent.
  void shutdown() override;

  // Threads started so far; they live until shutdown, which joins them.
  size_t threads_started() const;
  // Threads waiting for a job.
  size_t idle_threads() const;

 private:
  struct Worker {
    std::condition_variable wake;
    bool woken = false;
    std::thread thread;
  };
  void run(Worker& self);

  const size_t max_threads_;
  mutable std::mutex mutex_;
  std::deque<std::function<void()>> jobs_;
  std::list<Worker> workers_;  // stable addresses for idle_
  std::vector<Worker*> idle_;  // a stack: the back went idle last
  bool shutdown_ = false;
};

}  // namespace qs::server
