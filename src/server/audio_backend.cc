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
  std::vector<Active> active;
  while (admit(&active)) step(&active);
}

bool AudioBackend::admit(std::vector<Active>* active) {
  std::unique_lock<std::mutex> lock(mu_);
  if (active->empty()) wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
  while (!queue_.empty() && active->size() < kMaxActive) {
    auto [job, on_done] = std::move(queue_.front());
    queue_.pop_front();
    if (job.cancelled->load() || stopping_) {
      QS_LOG_INFO("transcription ended: cancelled before it started");
      on_done(Status(StatusCode::kInternal, "cancelled before it started"));
      continue;
    }
    active->push_back({std::move(job), std::move(on_done), nullptr});
  }
  return !active->empty() || !(stopping_ && queue_.empty());
}

void AudioBackend::step(std::vector<Active>* active) {
  const audio::WhisperModel& model = transcriber_.model();
  std::vector<bool> finished(active->size(), false);
  auto finish = [&](size_t i, Result<audio::Transcript> r) {
    if (!r.ok()) QS_LOG_INFO("transcription ended: %s", r.status().message().c_str());
    (*active)[i].on_done(std::move(r));
    finished[i] = true;
  };
  // Between windows: start new recordings (features), open their next window (the encoder).
  for (size_t i = 0; i < active->size(); ++i) {
    Active& a = (*active)[i];
    if (a.job.cancelled->load() || stopping_) {
      finish(i, Status(StatusCode::kInternal, "cancelled"));
      continue;
    }
    if (!a.task) {
      auto t = audio::TranscriptionTask::start(transcriber_, a.job.samples, a.job.options, pool_);
      if (!t.ok()) {
        finish(i, t.status());
        continue;
      }
      a.task = std::move(*t);
      a.job.samples = {};  // the task keeps the features it needs
    }
    if (Status s = a.task->open_window(pool_); !s.ok()) {
      finish(i, s);
      continue;
    }
    if (a.task->done()) finish(i, a.task->take_result());
  }
  // One decoder step for every sequence of every open window, as one batch.
  std::vector<audio::WhisperDecoderState*> states;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<size_t> owner_end;  // per active recording: its sequences end here
  for (size_t i = 0; i < active->size(); ++i) {
    if (!finished[i]) (*active)[i].task->window()->pending(&states, &tokens);
    owner_end.push_back(states.size());
  }
  if (!states.empty()) {
    std::vector<float> logits;
    const Status s = model.decode(states, tokens, false, &logits, pool_);
    const int64_t vocab = model.config().vocab_size;
    for (size_t i = 0, begin = 0; i < active->size(); begin = owner_end[i], ++i) {
      if (finished[i] || begin == owner_end[i]) continue;
      if (!s.ok()) {
        finish(i, s);
        continue;
      }
      audio::TranscriptionTask& t = *(*active)[i].task;
      t.window()->advance(logits.data() + static_cast<int64_t>(begin) * vocab);
      if (t.window()->done()) t.close_window();
    }
  }
  // A window can end without a decoder step (every hypothesis ended at its first token).
  for (size_t i = 0; i < active->size(); ++i) {
    if (finished[i]) continue;
    audio::TranscriptionTask& t = *(*active)[i].task;
    if (t.window() && t.window()->done()) t.close_window();
  }
  size_t kept = 0;
  for (size_t i = 0; i < active->size(); ++i) {
    if (finished[i]) continue;
    if (kept != i) (*active)[kept] = std::move((*active)[i]);  // never onto itself
    ++kept;
  }
  active->resize(kept);
}

}  // namespace qs::server
