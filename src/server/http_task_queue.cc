// server: the lazily started, last-idle-first task queue of http_task_queue.h.
#include "server/http_task_queue.h"

#include <algorithm>
#include <utility>

namespace qs::server {

HttpTaskQueue::HttpTaskQueue(size_t max_threads) : max_threads_(std::max<size_t>(max_threads, 1)) {}

HttpTaskQueue::~HttpTaskQueue() {
  shutdown();
}

void HttpTaskQueue::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.push_back(std::move(fn));
  if (!idle_.empty()) {
    Worker* w = idle_.back();
    idle_.pop_back();
    w->woken = true;
    w->wake.notify_one();
  } else if (workers_.size() < max_threads_ && !shutdown_) {
    Worker& w = workers_.emplace_back();
    w.thread = std::thread([this, &w] { run(w); });
  }
  // Otherwise every thread is busy: the first to finish takes the job.
}

void HttpTaskQueue::run(Worker& self) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!jobs_.empty()) {
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;  // the job's captures die outside the lock too
      lock.lock();
      continue;
    }
    if (shutdown_) return;
    self.woken = false;
    idle_.push_back(&self);
    self.wake.wait(lock, [&] { return self.woken || shutdown_; });
    // Woken by shutdown while still listed: unlist, so that enqueue never picks it.
    if (!self.woken) idle_.erase(std::find(idle_.begin(), idle_.end(), &self));
  }
}

void HttpTaskQueue::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_ && workers_.empty()) return;
    shutdown_ = true;
    for (Worker& w : workers_) w.wake.notify_one();
  }
  // No thread starts once shutdown_ is set, so the list is final here.
  for (Worker& w : workers_) {
    if (w.thread.joinable()) w.thread.join();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  workers_.clear();
  idle_.clear();
}

size_t HttpTaskQueue::threads_started() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return workers_.size();
}

size_t HttpTaskQueue::idle_threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

}  // namespace qs::server
