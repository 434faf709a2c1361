// server: the speech engine of a transcription server. One engine thread owns the
// WhisperTranscriber's ThreadPool and runs the queued jobs first come, first served, one
// recording at a time; HTTP threads only validate, decode the upload, submit and cancel. A
// job's cancel flag (its client went away, or the server is stopping) is looked at before the
// job starts: a transcription once started runs to its end.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "audio/transcribe.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace qs::server {

struct AudioJob {
  std::vector<float> samples;  // [n_samples] mono at the transcriber's mel_config().sample_rate
  audio::TranscribeOptions options;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by the HTTP side; never null
};

// Called once per job on the engine thread: the transcript, or the error ("cancelled before
// it started" for a cancelled job).
using AudioCallback = std::function<void(Result<audio::Transcript>)>;

class AudioBackend {
 public:
  // Starts the engine thread; from here on `pool` belongs to it.
  AudioBackend(audio::WhisperTranscriber transcriber, ThreadPool& pool);
  ~AudioBackend();
  AudioBackend(const AudioBackend&) = delete;
  AudioBackend& operator=(const AudioBackend&) = delete;

  // Configuration only (the tokens, the mel front end, the default options): safe to read on
  // any thread while the engine thread transcribes.
  const audio::WhisperTranscriber& transcriber() const { return transcriber_; }

  // Queues a job behind the others; an error (the backend is shut down) means no callback.
  Status submit(AudioJob job, AudioCallback on_done);
  bool healthy() const { return !stopping_.load(); }
  // Stops accepting jobs and cancels the queued ones (their callbacks still come); the running
  // one finishes. Idempotent. shutdown() also joins the engine thread.
  void cancel_all();
  void shutdown();

 private:
  void run();

  const audio::WhisperTranscriber transcriber_;
  ThreadPool& pool_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards queue_
  std::condition_variable wake_;
  std::deque<std::pair<AudioJob, AudioCallback>> queue_;
  std::mutex join_mu_;  // serialises shutdown() callers
  std::thread thread_;
};

}  // namespace qs::server
