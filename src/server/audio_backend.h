// server: the speech engine of a transcription server. One engine thread owns the
// WhisperTranscriber's ThreadPool and keeps up to kMaxActive recordings going at once, in
// first-come order: each step it opens the next window of every recording between windows
// (its encoder pass) and then feeds one token to every sequence of every open window in a
// single batched decoder pass, so that concurrent requests share the decoder's weight reads
// (continuous batching, as the text engine does). HTTP threads only validate, decode the
// upload, submit and cancel. A job's cancel flag (its client went away, or the server is
// stopping) is looked at before it starts and between its steps.
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
// it started", or "cancelled" once started).
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
  // Recordings transcribed at once; later jobs wait in the queue.
  static constexpr size_t kMaxActive = 16;

  // Stops accepting jobs and cancels the queued and running ones (their callbacks still
  // come). Idempotent. shutdown() also joins the engine thread.
  void cancel_all();
  void shutdown();

 private:
  struct Active {
    AudioJob job;
    AudioCallback on_done;
    std::unique_ptr<audio::TranscriptionTask> task;
  };
  void run();
  // Moves queued jobs into `active` up to kMaxActive (waiting while there is nothing to do);
  // false when stopping with nothing left.
  bool admit(std::vector<Active>* active);
  // One engine step over every active recording; finished ones get their callback and leave.
  void step(std::vector<Active>* active);

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
