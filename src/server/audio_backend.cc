// server: the speech engine thread (see audio_backend.h).
#include "server/audio_backend.h"

#include <utility>

#include "core/log.h"

namespace qs::server {

AudioBackend::AudioBackend(audio::WhisperTranscriber transcriber, ThreadPool& pool)
    : transcriber_(std::move(transcriber)), pool_(pool), thread_([this] { run(); }) {}

AudioBackend::~AudioBackend() {
  shutdown();
}

Status AudioBackend::submit(AudioJob job, AudioCallback on_done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kInternal, "the speech engine has stopped");
    queue_.emplace_back(std::move(job), std::move(on_done));
  }
  wake_.notify_one();
  return ok_status();
}

void AudioBackend::cancel_all() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (auto& [job, cb] : queue_) job.cancelled->store(true);
  wake_.notify_one();
}

void AudioBackend::shutdown() {
  cancel_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

void AudioBackend::run() {
  for (;;) {
    std::pair<AudioJob, AudioCallback> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every job has had its callback
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    const AudioJob& job = next.first;
    if (job.cancelled->load() || stopping_) {
      QS_LOG_INFO("transcription ended: cancelled before it started");
      next.second(Status(StatusCode::kInternal, "cancelled before it started"));
      continue;
    }
    Result<audio::Transcript> transcript = transcriber_.transcribe(job.samples, job.options, pool_);
    if (!transcript.ok()) {
      QS_LOG_INFO("transcription ended: %s", transcript.status().message().c_str());
    }
    next.second(std::move(transcript));
  }
}

}  // namespace qs::server
