// server: the image engine of a pipeline server. One engine thread owns the FluxPipeline's
// ThreadPool and runs the queued jobs first come, first served, one image at a time; HTTP
// threads only validate, submit and cancel. A job's cancel flag (its client went away, or the
// server is stopping) is looked at before the job starts and after every denoising step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/flux_pipeline.h"

namespace qs::server {

// One request's images, generated in order (n > 1: seeds seed, seed + 1, ...).
struct ImageJob {
  std::vector<diffusion::FluxRequest> images;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by the HTTP side; never null
};

// Called once per job on the engine thread: every image, or the first error (a cancelled job
// gets the pipeline's "cancelled after step ..." error, or "cancelled before it started").
using ImageCallback = std::function<void(Result<std::vector<diffusion::FluxImage>>)>;

class ImageBackend {
 public:
  // Starts the engine thread; from here on `pool` belongs to it.
  ImageBackend(std::unique_ptr<diffusion::FluxPipeline> pipeline, ThreadPool& pool);
  ~ImageBackend();
  ImageBackend(const ImageBackend&) = delete;
  ImageBackend& operator=(const ImageBackend&) = delete;

  // The pipeline's checks, without running it (safe on any thread: configuration only).
  Status validate(const diffusion::FluxRequest& request) const;
  int64_t default_size() const { return pipeline_->default_size(); }

  // Queues a job behind the others; an error (the backend is shut down) means no callback.
  Status submit(ImageJob job, ImageCallback on_done);
  bool healthy() const { return !stopping_.load(); }
  // Stops accepting jobs and cancels the queued and running ones (their callbacks still
  // come); idempotent. shutdown() also joins the engine thread.
  void cancel_all();
  void shutdown();

 private:
  void run();

  std::unique_ptr<diffusion::FluxPipeline> pipeline_;
  ThreadPool& pool_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards queue_
  std::condition_variable wake_;
  std::deque<std::pair<ImageJob, ImageCallback>> queue_;
  std::mutex join_mu_;  // serialises shutdown() callers
  std::thread thread_;
};

}  // namespace qs::server
