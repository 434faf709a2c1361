// server: the video engine thread (see video_backend.h).
#include "server/video_backend.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/log.h"
#include "diffusion/png_image.h"
#include "vision/video_writer.h"

namespace qs::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

// Linux keeps the process's peak resident set as VmHWM; writing "5" to clear_refs resets it to
// the current RSS (proc(5)), so that each job measures its own peak.
bool reset_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool written = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && written;
}

std::optional<int64_t> peak_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return std::nullopt;
  char line[256];
  std::optional<int64_t> out;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long kib = 0;
    if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%lld", &kib) == 1) {
      out = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return out;
}

// The server picks this backend by the family's output (cmd_serve); an image pipeline here is
// our bug, not the user's.
std::unique_ptr<diffusion::DiffusionPipeline> video_pipeline(
    std::unique_ptr<diffusion::DiffusionPipeline> pipeline) {
  QS_CHECK(pipeline != nullptr);
  QS_CHECK_MSG(pipeline->output() == diffusion::PipelineOutput::kVideo,
               "VideoBackend serves video pipelines");
  return pipeline;
}

}  // namespace

int VideoProgress::percent() const {
  switch (stage) {
    case VideoStage::kQueued:
      return 0;
    case VideoStage::kDenoising:
      return steps > 0 ? static_cast<int>(90 * step / steps) : 0;
    case VideoStage::kDecoding:
      return 90;
    case VideoStage::kEncoding:
      return 95;
    case VideoStage::kFinished:
      return 100;
  }
  return 0;
}

VideoProgress VideoJobState::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  return progress_;
}

void VideoJobState::set_progress(VideoStage stage, int64_t step, int64_t steps) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_ = VideoProgress{stage, step, steps};
}

VideoBackend::VideoBackend(std::unique_ptr<diffusion::DiffusionPipeline> pipeline, ThreadPool& pool,
                           int64_t memory_budget_bytes)
    : pipeline_(video_pipeline(std::move(pipeline))),
      pool_(pool),
      memory_budget_bytes_(memory_budget_bytes),
      thread_([this] { run(); }) {}

VideoBackend::~VideoBackend() {
  shutdown();
}

Status VideoBackend::validate(const diffusion::DiffusionRequest& request) const {
  QS_RETURN_IF_ERROR(pipeline_->validate(request));
  const size_t peak = pipeline_->request_peak_bytes(request, pool_.n_threads());
  if (peak > static_cast<size_t>(memory_budget_bytes_)) {
    char message[320];
    std::snprintf(message, sizeof(message),
                  "This video (%lldx%lld, %lld frames) needs %.2f GiB beyond the loaded weights, "
                  "more than the server's video memory budget of %.2f GiB "
                  "(--video-memory-budget): ask for fewer frames or a smaller size.",
                  static_cast<long long>(request.width.value_or(0)),
                  static_cast<long long>(request.height.value_or(0)),
                  static_cast<long long>(request.num_frames.value_or(0)),
                  gib(static_cast<int64_t>(peak)), gib(memory_budget_bytes_));
    return invalid_argument(message);
  }
  return ok_status();
}

Status VideoBackend::submit(VideoJob job, VideoCallback on_done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kInternal, "the video engine has stopped");
    if (queue_.size() >= kMaxQueued) {
      return unavailable("The server has " + std::to_string(kMaxQueued) +
                         " videos waiting already; try again later.");
    }
    queue_.emplace_back(std::move(job), std::move(on_done));
  }
  wake_.notify_one();
  return ok_status();
}

void VideoBackend::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& [job, cb] : queue_) job.state->cancel();
  wake_.notify_one();
}

void VideoBackend::shutdown() {
  cancel_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void VideoBackend::run() {
  for (;;) {
    std::pair<VideoJob, VideoCallback> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every job has had its callback
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const VideoCallback on_done = std::move(next.second);
    const std::shared_ptr<VideoJobState> state = next.first.state;
    // The job (its request, its first frame) is gone once run_job returns: the callback's
    // MP4 is all that outlives it.
    Result<VideoOutput> out = run_job(std::move(next.first));
    if (out.ok()) {
      state->set_progress(VideoStage::kFinished, 0, 0);
    } else {
      QS_LOG_INFO("video job ended: %s", out.status().message().c_str());
    }
    on_done(std::move(out));
  }
}

Result<VideoOutput> VideoBackend::run_job(VideoJob job) {
  const std::shared_ptr<VideoJobState> state = job.state;
  auto cancelled = [this, state] { return state->cancelled() || stopping_.load(); };
  if (cancelled()) return Status(StatusCode::kInternal, "cancelled before it started");
  // Resolved already by the handler; again here, since denoise() and decode() take a resolved
  // request and resolving is idempotent.
  diffusion::DiffusionRequest req = pipeline_->resolve(std::move(job.request));
  const int64_t steps = req.num_inference_steps.value_or(0);
  // Logged so that operators (and the tests) can tell a job that runs from one still queued.
  QS_LOG_INFO(
      "video job started: %lldx%lld, %lld frames at %d fps, %lld steps",
      static_cast<long long>(req.width.value_or(0)), static_cast<long long>(req.height.value_or(0)),
      static_cast<long long>(req.num_frames.value_or(0)), job.fps, static_cast<long long>(steps));
  const bool measure_peak = reset_peak_rss();
  const Clock::time_point t0 = Clock::now();
  state->set_progress(VideoStage::kDenoising, 0, steps);
  req.on_step = [state](int64_t i, int64_t n, const std::vector<float>&) {
    const bool last = i + 1 >= n;
    state->set_progress(last ? VideoStage::kDecoding : VideoStage::kDenoising, i + 1, n);
  };
  req.cancelled = cancelled;

  VideoOutput out;
  out.fps = job.fps;
  std::vector<uint8_t> rgb8;
  double denoise_seconds = 0;
  {
    // The latents, float frames and final latents are dropped here, before the encoder's
    // buffers exist.
    QS_ASSIGN_OR_RETURN(std::vector<float> latents, pipeline_->denoise(req, pool_));
    denoise_seconds = seconds_since(t0);
    QS_ASSIGN_OR_RETURN(diffusion::DiffusionOutput video,
                        pipeline_->decode(std::move(latents), req, pool_));
    out.width = video.width;
    out.height = video.height;
    out.frames = video.frames;
    rgb8 = diffusion::to_rgb8(video.rgb);
  }
  const double decode_end = seconds_since(t0);
  if (cancelled()) return Status(StatusCode::kInternal, "cancelled before encoding");
  state->set_progress(VideoStage::kEncoding, steps, steps);
  vision::VideoWriteOptions options;
  options.fps = job.fps;
  options.threads = pool_.n_threads();
  const Clock::time_point encode_start = Clock::now();
  QS_ASSIGN_OR_RETURN(out.mp4,
                      vision::encode_mp4(rgb8.data(), out.frames, out.height, out.width, options));
  out.inference_seconds = seconds_since(t0);
  out.stage_seconds = {{"denoise", denoise_seconds},
                       {"decode", decode_end - denoise_seconds},
                       {"encode", seconds_since(encode_start)}};
  if (measure_peak) {
    if (std::optional<int64_t> peak = peak_rss_bytes()) {
      out.peak_memory_mb = static_cast<double>(*peak) / (1024.0 * 1024.0);
    }
  }
  QS_LOG_INFO("video job done: %lld frames, %zu MP4 bytes in %.2f s",
              static_cast<long long>(out.frames), out.mp4.size(), out.inference_seconds);
  return out;
}

}  // namespace qs::server
