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

#include "audio/log_mel_config.h"
#include "audio/whisper_decode.h"
#include "audio/whisper_model.h"
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
  static Result<WhisperTranscriber> load(const std::string& dir);

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

}  // namespace qs::audio
