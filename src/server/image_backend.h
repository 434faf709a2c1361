// server: the image engine of a pipeline server. One engine thread owns the image pipeline's
// ThreadPool and runs the queued jobs first come, first served, one image at a time; HTTP
// threads only validate, submit and cancel. A job's cancel flag (its client went away, or the
// server is stopping) is looked at before the job starts and after every denoising step. The
// pipeline is any family's whose output is images (diffusion::DiffusionPipeline).
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
#include "diffusion/pipeline.h"

namespace qs::server {

// One request's images, generated in order (n > 1: seeds seed, seed + 1, ...).
struct ImageJob {
  std::vector<diffusion::DiffusionRequest> images;  // resolved by the pipeline
  std::shared_ptr<std::atomic<bool>> cancelled;     // set by the HTTP side; never null
};

// Called once per job on the engine thread: every image (one frame each), or the first error
// (a cancelled job gets the pipeline's "cancelled after step ..." error, or "cancelled before
// it started").
using ImageCallback = std::function<void(Result<std::vector<diffusion::DiffusionOutput>>)>;

class ImageBackend {
 public:
  // Starts the engine thread; from here on `pool` belongs to it. `pipeline` makes images.
  ImageBackend(std::unique_ptr<diffusion::DiffusionPipeline> pipeline, ThreadPool& pool);
  ~ImageBackend();
  ImageBackend(const ImageBackend&) = delete;
  ImageBackend& operator=(const ImageBackend&) = delete;

  // Configuration only (resolve, validate, class_name): safe on any thread while the engine
  // thread runs.
  const diffusion::DiffusionPipeline& pipeline() const { return *pipeline_; }
  // The pipeline's checks of a resolved request, without running it.
  Status validate(const diffusion::DiffusionRequest& request) const;

  // Queues a job behind the others; an error (the backend is shut down) means no callback.
  Status submit(ImageJob job, ImageCallback on_done);
  bool healthy() const { return !stopping_.load(); }
  // Stops accepting jobs and cancels the queued and running ones (their callbacks still
  // come); idempotent. shutdown() also joins the engine thread.
  void cancel_all();
  void shutdown();

 private:
  void run();

  std::unique_ptr<diffusion::DiffusionPipeline> pipeline_;
  ThreadPool& pool_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards queue_
  std::condition_variable wake_;
  std::deque<std::pair<ImageJob, ImageCallback>> queue_;
  std::mutex join_mu_;  // serialises shutdown() callers
  std::thread thread_;
};

}  // namespace qs::server
