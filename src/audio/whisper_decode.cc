// audio: one window of Whisper decoding (see whisper_decode.h). The rules follow
// CTranslate2's WhisperReplica::generate and its ApplyTimestampRules, and the fallback
// faster-whisper's generate_with_fallback, so that greedy text equals theirs token for token.
#include "audio/whisper_decode.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "audio/whisper_window.h"

namespace qs::audio {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Whisper's languages, in its token order (tokenizer.py of openai/whisper); a multilingual
// vocabulary has <|code|> for each code its size allows.
constexpr const char* kLanguageCodes[] = {
    "en", "zh", "de", "es",  "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
    "it", "id", "hi", "fi",  "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg",  "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
    "az", "sl", "kn", "et",  "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si",  "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
    "am", "yi", "lo", "uz",  "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"};

float logsumexp(const float* x, int64_t n) {
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == kNegInf) return kNegInf;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return mx + static_cast<float>(std::log(sum));
}

void suppress_range(float* logits, int64_t begin, int64_t end) {
  for (int64_t i = std::max<int64_t>(begin, 0); i < end; ++i) logits[i] = kNegInf;
}

}  // namespace

Result<std::vector<int32_t>> WhisperTokens::sot_sequence(const std::string& language,
                                                         const std::string& task) const {
  std::vector<int32_t> seq = {sot};
  if (!multilingual) {
    if (task == "translate") {
      return invalid_argument("this Whisper model is English-only: it cannot translate");
    }
    return seq;
  }
  auto it = languages.find(language);
  if (it == languages.end()) {
    return invalid_argument("language \"" + language + "\" is not one this model knows");
  }
  seq.push_back(it->second);
  seq.push_back(task == "translate" ? translate : transcribe);
  return seq;
}

Result<WhisperTokens> resolve_whisper_tokens(const tok::Tokenizer& t, int64_t vocab_size) {
  WhisperTokens ids;
  auto need = [&](const char* piece, int32_t* out) -> Status {
    *out = t.piece_to_id(piece);
    if (*out < 0) {
      return invalid_argument(std::string("whisper tokenizer: no ") + piece + " token");
    }
    return ok_status();
  };
  QS_RETURN_IF_ERROR(need("<|endoftext|>", &ids.eot));
  QS_RETURN_IF_ERROR(need("<|startoftranscript|>", &ids.sot));
  QS_RETURN_IF_ERROR(need("<|startofprev|>", &ids.sot_prev));
  QS_RETURN_IF_ERROR(need("<|startoflm|>", &ids.sot_lm));
  QS_RETURN_IF_ERROR(need("<|notimestamps|>", &ids.no_timestamps));
  QS_RETURN_IF_ERROR(need("<|transcribe|>", &ids.transcribe));
  QS_RETURN_IF_ERROR(need("<|translate|>", &ids.translate));
  // Older vocabularies call it <|nocaptions|>.
  ids.no_speech = t.piece_to_id("<|nospeech|>");
  if (ids.no_speech < 0) QS_RETURN_IF_ERROR(need("<|nocaptions|>", &ids.no_speech));
  ids.timestamp_begin = ids.no_timestamps + 1;
  ids.timestamp_end = static_cast<int32_t>(vocab_size - 1);
  if (ids.timestamp_begin > ids.timestamp_end || ids.eot >= ids.timestamp_begin) {
    return invalid_argument("whisper tokenizer: no timestamp tokens below the vocabulary size " +
                            std::to_string(vocab_size));
  }
  for (const char* code : kLanguageCodes) {
    const int32_t id = t.piece_to_id(std::string("<|") + code + "|>");
    if (id >= 0) ids.languages[code] = id;
  }
  // English-only checkpoints keep the language tokens in their tokenizer but were never
  // trained on them; their output vocabulary is one short of the multilingual 51865.
  ids.multilingual = vocab_size >= 51865 && !ids.languages.empty();
  return ids;
}

std::string strip_whitespace(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

double compression_ratio(const std::string& text) {
  if (text.empty()) return 0.0;
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::vector<Bytef> out(size);
  if (compress2(out.data(), &size, reinterpret_cast<const Bytef*>(text.data()),
                static_cast<uLong>(text.size()), Z_DEFAULT_COMPRESSION) != Z_OK) {
    return 0.0;
  }
  return static_cast<double>(text.size()) / static_cast<double>(size);
}

void apply_whisper_rules(const WhisperTokens& ids, const WhisperDecodeOptions& options,
                         int32_t max_initial_timestamp_id, const std::vector<int32_t>& sampled,
                         float* logits, int64_t vocab) {
  for (int32_t t : options.suppress_tokens) {
    if (t >= 0 && t < vocab) logits[t] = kNegInf;
  }
  if (sampled.empty() && options.suppress_blank) {
    for (int32_t t : options.begin_suppress_tokens) {
      if (t >= 0 && t < vocab) logits[t] = kNegInf;
    }
  }
  if (options.without_timestamps) return;
  const int64_t tb = ids.timestamp_begin, te = std::min<int64_t>(ids.timestamp_end, vocab - 1);
  logits[ids.no_timestamps] = kNegInf;
  bool check = false;
  if (sampled.empty()) {
    suppress_range(logits, 0, tb);
    suppress_range(logits, int64_t{max_initial_timestamp_id} + 1, te + 1);
  } else {
    const int32_t last = sampled.back();
    if (last >= tb) {
      const int32_t penultimate = sampled.size() >= 2 ? sampled[sampled.size() - 2] : last;
      if (penultimate >= tb) {
        suppress_range(logits, tb, te + 1);  // a pair closed: text must follow
      } else {
        suppress_range(logits, 0, ids.eot);  // an opening timestamp: its closing one or the end
        suppress_range(logits, tb, last);
        check = true;
      }
    } else {
      check = true;
      for (auto it = sampled.rbegin(); it != sampled.rend(); ++it) {
        if (*it >= tb) {  // timestamps never decrease
          suppress_range(logits, tb, int64_t{*it} + 1);
          break;
        }
      }
    }
  }
  if (!check) return;
  // CTranslate2 compares log-probabilities; the log-softmax subtracts the same log-sum-exp
  // from both sides, so the raw logits decide alike without a pass over the whole vocabulary.
  const float max_text = *std::max_element(logits, logits + tb);
  if (logsumexp(logits + tb, te - tb + 1) > max_text) suppress_range(logits, 0, tb);
}

Result<WindowResult> decode_window(const WhisperModel& model, const tok::Tokenizer& tokenizer,
                                   const WhisperTokens& ids, const float* enc, int64_t n_src,
                                   const std::vector<int32_t>& prompt,
                                   const WhisperDecodeOptions& options, std::mt19937_64& rng,
                                   ThreadPool& pool) {
  QS_ASSIGN_OR_RETURN(
      std::unique_ptr<WindowDecoder> w,
      WindowDecoder::start(model, tokenizer, ids, enc, n_src, prompt, options, &rng, pool));
  std::vector<WhisperDecoderState*> states;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> logits;
  while (!w->done()) {
    states.clear();
    tokens.clear();
    w->pending(&states, &tokens);
    QS_RETURN_IF_ERROR(model.decode(states, tokens, false, &logits, pool));
    w->advance(logits.data());
  }
  return w->result();
}

}  // namespace qs::audio
