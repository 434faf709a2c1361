// audio: speech to text with a Whisper checkpoint, over audio of any length, as
// faster-whisper's transcribe() walks it: log-mel features of the whole recording, 30 s
// windows starting where the previous window's last complete timestamp pair ended (or one
// window later), each decoded with the text so far as its prompt (until a fallback above
// prompt_reset_on_temperature resets it), windows the model calls silent skipped, and segments
// cut at the timestamp pairs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audio/log_mel.h"
#include "audio/log_mel_config.h"
#include "audio/whisper_decode.h"
#include "audio/whisper_model.h"
#include "audio/whisper_window.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace qs::audio {

struct TranscribeOptions {
  std::string language;  // "" = English on an English-only model, detected on a multilingual one
  std::string task = "transcribe";  // or "translate" (multilingual models)
  std::string initial_prompt;       // text the first window is conditioned on
  bool condition_on_previous_text = true;
  double prompt_reset_on_temperature = 0.5;
  WhisperDecodeOptions decode;  // suppress lists are filled from the checkpoint by default
};

struct TranscriptSegment {
  int64_t id = 0;
  int64_t seek = 0;  // the window's first frame
  double start = 0, end = 0;
  std::string text;  // as the tokens decode, leading space included
  std::vector<int32_t> tokens;
  double temperature = 0, avg_logprob = 0, compression_ratio = 0, no_speech_prob = 0;
};

struct Transcript {
  std::string language;  // code, e.g. "en"
  std::string task;
  double duration = 0;  // seconds of audio
  std::vector<TranscriptSegment> segments;
  std::string text() const;  // the segments' texts joined, stripped
};

// One window's tokens cut into segments at its timestamp pairs, and where the next window
// starts (faster-whisper's _split_segments_by_timestamps).
struct WindowSplit {
  std::vector<TranscriptSegment> segments;  // start, end, tokens, seek set
  int64_t next_seek = 0;
};
WindowSplit split_by_timestamps(const WhisperTokens& ids, const std::vector<int32_t>& tokens,
                                double time_offset, int64_t segment_size, double segment_duration,
                                int64_t seek);

class WhisperTranscriber {
 public:
  // `observer`, when given, is set on the model (WhisperModel::set_linear_observer): the
  // calibration of OPT-RTN transcribes through it.
  static Result<WhisperTranscriber> load(const std::string& dir, LinearObserver observer = {});

  const WhisperModel& model() const { return *model_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const WhisperTokens& tokens() const { return ids_; }
  const LogMelConfig& mel_config() const { return mel_; }
  // The checkpoint's defaults (generation_config.json's suppress lists) under `options`.
  TranscribeOptions default_options() const;

  // `samples`: mono at mel_config().sample_rate.
  Result<Transcript> transcribe(const std::vector<float>& samples, const TranscribeOptions& options,
                                ThreadPool& pool) const;

  // The most likely language token after <|startoftranscript|> for one window's encoder
  // output; "en" on an English-only model.
  Result<std::string> detect_language(const float* enc, ThreadPool& pool) const;

 private:
  std::shared_ptr<const WhisperModel> model_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  WhisperTokens ids_;
  LogMelConfig mel_;
  std::vector<int32_t> suppress_tokens_, begin_suppress_tokens_;
};

// One recording's transcription as a resumable task, so that an engine can keep several
// going and put their decoder steps into one batch: open_window() encodes the next window and
// starts its decoder (or marks the task done), the caller drives window() to done() (its
// pending() sequences fed alone or batched with other tasks'), close_window() cuts its
// segments and moves the seek. WhisperTranscriber::transcribe() drives one task alone.
class TranscriptionTask {
 public:
  // Features of the whole recording, the language (detected on the first window of a
  // multilingual model when not given), the initial prompt.
  static Result<std::unique_ptr<TranscriptionTask>> start(const WhisperTranscriber& w,
                                                          const std::vector<float>& samples,
                                                          const TranscribeOptions& options,
                                                          ThreadPool& pool);
  TranscriptionTask(const TranscriptionTask&) = delete;
  TranscriptionTask& operator=(const TranscriptionTask&) = delete;

  bool done() const { return done_; }
  Status open_window(ThreadPool& pool);
  WindowDecoder* window() { return window_.get(); }  // null between windows
  void close_window();
  Transcript take_result() { return std::move(out_); }

 private:
  TranscriptionTask(const WhisperTranscriber& w, const TranscribeOptions& options);
  Status encode_at(int64_t seek, int64_t size, ThreadPool& pool);

  const WhisperTranscriber& w_;
  const TranscribeOptions options_;
  std::mt19937_64 rng_;
  LogMel mel_;
  int64_t content_frames_ = 0;
  int64_t seek_ = 0, segment_size_ = 0;
  std::vector<float> segment_, enc_;  // the window's features and encoder output
  std::vector<int32_t> sot_seq_, all_tokens_;
  size_t prompt_reset_since_ = 0;
  std::unique_ptr<WindowDecoder> window_;
  Transcript out_;
  bool done_ = false;
};

}  // namespace qs::audio
