// audio: decoding one 30 s window of Whisper, as OpenAI's reference decoder and
// CTranslate2's (which faster-whisper drives) do it: the special-token prompt, suppressed
// tokens, the timestamp rules (timestamps in pairs, never decreasing, the first one within
// max_initial_timestamp, a timestamp forced when their summed probability beats every text
// token), the no-speech probability at <|startoftranscript|>, and temperature fallback (greedy
// first; sampled best-of-N at rising temperatures while the text is too repetitive by its
// compression ratio or too unlikely by its average log-probability).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "audio/whisper_model.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace qs::audio {

// The ids Whisper's prompt and rules need, found by name in the tokenizer (never by number:
// English-only and multilingual vocabularies place them differently). Timestamps are every id
// from the one after <|notimestamps|> to the end of the model's vocabulary.
struct WhisperTokens {
  int32_t eot = -1, sot = -1, sot_prev = -1, sot_lm = -1, no_speech = -1;
  int32_t no_timestamps = -1, timestamp_begin = -1, timestamp_end = -1;
  int32_t transcribe = -1, translate = -1;
  bool multilingual = false;
  std::map<std::string, int32_t> languages;  // "en" -> <|en|>, multilingual models only

  // <|startoftranscript|> [<|lang|> <|task|>]: the sequence after any previous text.
  Result<std::vector<int32_t>> sot_sequence(const std::string& language,
                                            const std::string& task) const;
};
Result<WhisperTokens> resolve_whisper_tokens(const tok::Tokenizer& tokenizer, int64_t vocab_size);

struct WhisperDecodeOptions {
  std::vector<float> temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f};
  int best_of = 5;  // sampled hypotheses per fallback temperature
  std::optional<double> compression_ratio_threshold = 2.4;
  std::optional<double> log_prob_threshold = -1.0;
  std::optional<double> no_speech_threshold = 0.6;
  bool without_timestamps = false;
  double max_initial_timestamp = 1.0;          // seconds
  bool suppress_blank = true;                  // begin_suppress_tokens at the first sampled step
  std::vector<int32_t> suppress_tokens;        // every step (generation_config + specials)
  std::vector<int32_t> begin_suppress_tokens;  // generation_config's begin_suppress_tokens
  uint64_t seed = 0;                           // of the fallback's sampling
};

struct WindowResult {
  std::vector<int32_t> tokens;  // sampled tokens, <|endoftext|> excluded
  double avg_logprob = 0;       // sum of log-probs (end of text included) / (tokens + 1)
  double no_speech_prob = 0;    // softmax of the raw logits at <|startoftranscript|>
  double temperature = 0;
  double compression_ratio = 0;
  std::string text;  // the tokens' text, stripped
};

// `s` without leading and trailing ASCII whitespace (Python's str.strip() on Whisper's text).
std::string strip_whitespace(const std::string& s);

// zlib's deflate at its default level: bytes / compressed bytes, Whisper's repetition test.
double compression_ratio(const std::string& text);

// Decodes one window whose encoder output is `enc` [n_src, d_model], after `prompt` (ending
// with the sot sequence, or <|notimestamps|>), with fallback over the option's temperatures.
Result<WindowResult> decode_window(const WhisperModel& model, const tok::Tokenizer& tokenizer,
                                   const WhisperTokens& ids, const float* enc, int64_t n_src,
                                   const std::vector<int32_t>& prompt,
                                   const WhisperDecodeOptions& options, std::mt19937_64& rng,
                                   ThreadPool& pool);

// The logits rules of one step, in place: suppressed tokens to -inf given the tokens sampled
// so far. Exposed for tests.
void apply_whisper_rules(const WhisperTokens& ids, const WhisperDecodeOptions& options,
                         int32_t max_initial_timestamp_id, const std::vector<int32_t>& sampled,
                         float* logits, int64_t vocab);

}  // namespace qs::audio
