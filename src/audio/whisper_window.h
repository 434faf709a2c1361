// audio: one window's decoding (whisper_decode.h's rules and fallback) as a state machine, so
// that whoever drives it can put the decoder steps of many windows, of many requests, into
// one WhisperModel::decode: pending() says which sequences need a token fed and which, the
// caller runs them (alone or batched with others) and hands the rows of logits to advance().
// decode_window() is the one-window driver; the server's audio engine drives many at once.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "audio/whisper_decode.h"
#include "audio/whisper_model.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace qs::audio {

class WindowDecoder {
 public:
  // Feeds the prompt (the no-speech probability comes from its <|startoftranscript|> row) and
  // takes the first step of the first temperature, which needs no further decode. `enc`
  // [n_src, d_model] is read only here (its keys and values are projected into the state).
  // `tokenizer`, `ids` and `rng` must outlive the decoder; `options` is copied.
  static Result<std::unique_ptr<WindowDecoder>> start(
      const WhisperModel& model, const tok::Tokenizer& tokenizer, const WhisperTokens& ids,
      const float* enc, int64_t n_src, const std::vector<int32_t>& prompt,
      const WhisperDecodeOptions& options, std::mt19937_64* rng, ThreadPool& pool);

  bool done() const { return done_; }
  // The sequences waiting for their last sampled token to be fed, with that token; appended
  // to `states` and `tokens` (one token each). Empty once done().
  void pending(std::vector<WhisperDecoderState*>* states,
               std::vector<std::vector<int32_t>>* tokens);
  // The logits [rows, vocab] of the sequences pending() gave, in its order.
  void advance(const float* logits);
  // The window's outcome, once done().
  const WindowResult& result() const { return final_; }

 private:
  struct Hypothesis {
    WhisperDecoderState state;
    std::vector<int32_t> tokens;  // sampled, end of text excluded
    double sum_logprob = 0;
    bool done = false;
  };

  WindowDecoder(const tok::Tokenizer& tokenizer, const WhisperTokens& ids,
                const WhisperDecodeOptions& options, std::mt19937_64* rng);
  void begin_pass();
  // Samples the next token of `h` from `row` (vocab logits, changed in place).
  void step(Hypothesis& h, float* row);
  void end_pass();

  const tok::Tokenizer& tokenizer_;
  const WhisperTokens& ids_;
  const WhisperDecodeOptions options_;
  std::mt19937_64* rng_;
  int64_t vocab_ = 0, max_steps_ = 0;
  int32_t max_initial_id_ = 0;
  WhisperDecoderState prompt_state_;
  std::vector<float> first_logits_;  // after the prompt, shared by every pass's first step
  double no_speech_prob_ = 0;
  size_t temperature_ = 0;  // index into options_.temperatures
  int64_t step_ = 0;        // steps taken in this pass
  std::vector<Hypothesis> hyps_;
  std::vector<WindowResult> all_, below_cr_;
  WindowResult final_;
  bool done_ = false;
};

}  // namespace qs::audio
