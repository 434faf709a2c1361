// server: the image engine thread (see image_backend.h).
#include "server/image_backend.h"

#include <utility>

#include "core/check.h"
#include "core/log.h"

namespace qs::server {
namespace {

// The server picks this backend by the family's output (cmd_serve); a video pipeline here is
// our bug, not the user's.
std::unique_ptr<diffusion::DiffusionPipeline> image_pipeline(
    std::unique_ptr<diffusion::DiffusionPipeline> pipeline) {
  QS_CHECK(pipeline != nullptr);
  QS_CHECK_MSG(pipeline->output() == diffusion::PipelineOutput::kImage,
               "ImageBackend serves image pipelines");
  return pipeline;
}

}  // namespace

ImageBackend::ImageBackend(std::unique_ptr<diffusion::DiffusionPipeline> pipeline, ThreadPool& pool)
    : pipeline_(image_pipeline(std::move(pipeline))), pool_(pool), thread_([this] { run(); }) {}

ImageBackend::~ImageBackend() {
  shutdown();
}

Status ImageBackend::validate(const diffusion::DiffusionRequest& request) const {
  return pipeline_->validate(request);
}

Status ImageBackend::submit(ImageJob job, ImageCallback on_done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kInternal, "the image engine has stopped");
    queue_.emplace_back(std::move(job), std::move(on_done));
  }
  wake_.notify_one();
  return ok_status();
}

void ImageBackend::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& [job, cb] : queue_) job.cancelled->store(true);
  wake_.notify_one();
}

void ImageBackend::shutdown() {
  cancel_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void ImageBackend::run() {
  for (;;) {
    std::pair<ImageJob, ImageCallback> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every job has had its callback
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    ImageJob& job = next.first;
    const std::shared_ptr<std::atomic<bool>> flag = job.cancelled;
    if (flag->load() || stopping_) {
      QS_LOG_INFO("image job ended: cancelled before it started");
      next.second(Status(StatusCode::kInternal, "cancelled before it started"));
      continue;
    }
    // Logged so that operators (and the SIGTERM test) can tell a job that is running from one
    // still queued: only a running one ends "cancelled after step N".
    QS_LOG_INFO("image job started: %zu image(s), %lld steps", job.images.size(),
                job.images.empty()
                    ? 0LL
                    : static_cast<long long>(job.images[0].num_inference_steps.value_or(0)));
    std::vector<diffusion::DiffusionOutput> images;
    Status failed;
    for (diffusion::DiffusionRequest& req : job.images) {
      req.cancelled = [this, flag] { return flag->load() || stopping_.load(); };
      Result<diffusion::DiffusionOutput> image = pipeline_->generate(std::move(req), pool_);
      if (!image.ok()) {
        failed = image.status();
        break;
      }
      images.push_back(std::move(*image));
    }
    if (!failed.ok()) {
      QS_LOG_INFO("image job ended: %s", failed.message().c_str());
      next.second(failed);
    } else {
      next.second(std::move(images));
    }
  }
}

}  // namespace qs::server
