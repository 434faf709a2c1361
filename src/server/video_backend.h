// server: the video engine of a pipeline server. One engine thread owns the video pipeline's
// ThreadPool and runs the queued jobs first come, first served, one video at a time: the
// denoising steps, the decode and the MP4 encode, so that the MP4's bytes are all a finished
// job leaves behind. HTTP threads only validate, submit, read a job's progress and cancel. A
// job's cancel flag (its client went away, it was deleted, or the server is stopping) is looked
// at before the job starts, after every denoising step and before the encode. The pipeline is
// any family's whose output is videos (diffusion::DiffusionPipeline).
//
// Memory: a request whose request_peak_bytes is over the budget is refused before it is
// queued. Jobs run one at a time, so the running job's reservation is the only one held;
// a queued job holds only its request (the prompt and, for image to video, one frame).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/pipeline.h"

namespace qs::server {

enum class VideoStage { kQueued, kDenoising, kDecoding, kEncoding, kFinished };

// Where a job is, as the engine thread last set it.
struct VideoProgress {
  VideoStage stage = VideoStage::kQueued;
  int64_t step = 0;   // denoising steps done
  int64_t steps = 0;  // of this many
  // 0 to 100: the steps take 0 to 90 (the bulk of the time at real sizes), decoding starts at
  // 90, encoding at 95, a finished job is 100.
  int percent() const;
};

// What the HTTP side and the engine thread share of one job.
class VideoJobState {
 public:
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  VideoProgress progress() const;
  void set_progress(VideoStage stage, int64_t step, int64_t steps);

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  VideoProgress progress_;
};

struct VideoJob {
  diffusion::DiffusionRequest request;  // resolved, validated; on_step, cancelled: the backend's
  int fps = 16;
  std::shared_ptr<VideoJobState> state;  // never null
};

struct VideoOutput {
  std::string mp4;
  int64_t width = 0, height = 0, frames = 0;
  int fps = 0;
  double inference_seconds = 0;  // the job's start to its MP4
  // Seconds per stage, in order: "denoise", "decode", "encode".
  std::vector<std::pair<std::string, double>> stage_seconds;
  // The process's peak resident memory while the job ran (Linux's VmHWM, reset as the job
  // starts); unset where the kernel does not let us reset or read it.
  std::optional<double> peak_memory_mb;
};

// Called once per job on the engine thread: the MP4, or the first error (a cancelled job gets
// "cancelled before it started", the pipeline's "cancelled after step ..." or "cancelled before
// encoding").
using VideoCallback = std::function<void(Result<VideoOutput>)>;

class VideoBackend {
 public:
  // Jobs waiting in the queue at most; past it a submit is refused (503), so that clients cannot
  // pile up requests and their first frames without bound.
  static constexpr size_t kMaxQueued = 64;

  // Starts the engine thread; from here on `pool` belongs to it. `memory_budget_bytes` bounds
  // request_peak_bytes of every request.
  VideoBackend(std::unique_ptr<diffusion::DiffusionPipeline> pipeline, ThreadPool& pool,
               int64_t memory_budget_bytes);
  ~VideoBackend();
  VideoBackend(const VideoBackend&) = delete;
  VideoBackend& operator=(const VideoBackend&) = delete;

  // Configuration only: safe on any thread while the engine thread runs.
  const diffusion::DiffusionPipeline& pipeline() const { return *pipeline_; }
  // The model's own frame rate (Wan2.2: 24 fps for TI2V-5B, 16 for the A14B models).
  int default_fps() const { return pipeline_->default_fps(); }
  int64_t memory_budget_bytes() const { return memory_budget_bytes_; }

  // The pipeline's checks of a resolved request, then the memory budget (a 400's message giving
  // both sizes in GiB).
  Status validate(const diffusion::DiffusionRequest& request) const;

  // Queues a job behind the others; an error (shut down: kInternal; queue full: kUnavailable)
  // means no callback.
  Status submit(VideoJob job, VideoCallback on_done);
  bool healthy() const { return !stopping_.load(); }
  // Stops accepting jobs and cancels the queued and running ones (their callbacks still come);
  // idempotent. shutdown() also joins the engine thread.
  void cancel_all();
  void shutdown();

 private:
  void run();
  Result<VideoOutput> run_job(VideoJob job);

  std::unique_ptr<diffusion::DiffusionPipeline> pipeline_;
  ThreadPool& pool_;
  const int64_t memory_budget_bytes_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards queue_
  std::condition_variable wake_;
  std::deque<std::pair<VideoJob, VideoCallback>> queue_;
  std::mutex join_mu_;  // serialises shutdown() callers
  std::thread thread_;
};

}  // namespace qs::server
