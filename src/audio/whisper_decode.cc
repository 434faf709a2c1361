// audio: one window of Whisper decoding (see whisper_decode.h). The rules follow
// CTranslate2's WhisperReplica::generate and its ApplyTimestampRules, and the fallback
// faster-whisper's generate_with_fallback, so that greedy text equals theirs token for token.
#include "audio/whisper_decode.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <limits>

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

std::string strip_text(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// log_softmax in place; returns nothing useful for an all -inf row (never: eot or a
// timestamp always survives the rules).
void log_softmax(float* x, int64_t n) {
  float mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) x[i] -= lse;
}

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

struct Hypothesis {
  WhisperDecoderState state;
  std::vector<int32_t> tokens;  // sampled, end of text excluded
  double sum_logprob = 0;
  bool done = false;
};

// One decoding pass at `temperature` over `n_hyp` hypotheses that share the prompt's state.
Result<std::vector<Hypothesis>> run_pass(const WhisperModel& model, const WhisperTokens& ids,
                                         const WhisperDecodeOptions& options,
                                         const WhisperDecoderState& prompt_state,
                                         const std::vector<float>& first_logits, int64_t max_steps,
                                         float temperature, int n_hyp, std::mt19937_64& rng,
                                         ThreadPool& pool) {
  const int64_t vocab = model.config().vocab_size;
  const int32_t max_initial =
      ids.timestamp_begin + static_cast<int32_t>(std::lround(options.max_initial_timestamp / 0.02));
  std::vector<Hypothesis> hyps(static_cast<size_t>(n_hyp));
  for (Hypothesis& h : hyps) h.state = prompt_state;
  std::vector<float> logits;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int64_t step = 0; step < max_steps; ++step) {
    std::vector<WhisperDecoderState*> states;
    std::vector<std::vector<int32_t>> feed;
    std::vector<Hypothesis*> alive;
    for (Hypothesis& h : hyps) {
      if (h.done) continue;
      alive.push_back(&h);
      if (step > 0) {
        states.push_back(&h.state);
        feed.push_back({h.tokens.back()});
      }
    }
    if (alive.empty()) break;
    if (step > 0) QS_RETURN_IF_ERROR(model.decode(states, feed, false, &logits, pool));
    for (size_t i = 0; i < alive.size(); ++i) {
      Hypothesis& h = *alive[i];
      std::vector<float> row = step == 0 ? first_logits
                                         : std::vector<float>(logits.begin() + i * vocab,
                                                              logits.begin() + (i + 1) * vocab);
      apply_whisper_rules(ids, options, max_initial, h.tokens, row.data(), vocab);
      log_softmax(row.data(), vocab);
      int32_t next = 0;
      if (temperature <= 0.0f) {
        next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      } else {
        float mx = kNegInf;
        for (float v : row) mx = std::max(mx, v);
        double sum = 0;
        std::vector<double> p(row.size());
        for (size_t t = 0; t < row.size(); ++t) {
          p[t] = std::exp(static_cast<double>(row[t] - mx) / temperature);
          sum += p[t];
        }
        double u = uniform(rng) * sum;
        next = static_cast<int32_t>(vocab - 1);
        for (size_t t = 0; t < p.size(); ++t) {
          if (p[t] > 0 && (u -= p[t]) <= 0) {
            next = static_cast<int32_t>(t);
            break;
          }
        }
      }
      h.sum_logprob += row[next];
      if (next == ids.eot || step == max_steps - 1) {
        if (next != ids.eot) h.tokens.push_back(next);
        h.done = true;
      } else {
        h.tokens.push_back(next);
      }
    }
  }
  return hyps;
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
  const int64_t vocab = model.config().vocab_size, max_t = model.config().max_target_positions;
  auto sot_at = std::find(prompt.begin(), prompt.end(), ids.sot);
  if (sot_at == prompt.end()) return invalid_argument("whisper: the prompt has no sot token");
  if (static_cast<int64_t>(prompt.size()) >= max_t) {
    return invalid_argument("whisper: a prompt of " + std::to_string(prompt.size()) +
                            " tokens leaves no room below " + std::to_string(max_t));
  }
  // The prompt up to <|startoftranscript|> gives the no-speech probability from that
  // position's raw logits; the rest of it (language, task) the first step's logits.
  WhisperDecoderState prompt_state;
  QS_RETURN_IF_ERROR(model.start(enc, n_src, &prompt_state, pool));
  WhisperDecoderState* ps[] = {&prompt_state};
  std::vector<float> logits;
  const std::vector<std::vector<int32_t>> head = {{prompt.begin(), sot_at + 1}};
  QS_RETURN_IF_ERROR(model.decode(ps, head, false, &logits, pool));
  WindowResult best_shape;
  {
    std::vector<float> lp(logits);
    log_softmax(lp.data(), vocab);
    best_shape.no_speech_prob = std::exp(static_cast<double>(lp[ids.no_speech]));
  }
  if (sot_at + 1 != prompt.end()) {
    const std::vector<std::vector<int32_t>> tail = {{sot_at + 1, prompt.end()}};
    QS_RETURN_IF_ERROR(model.decode(ps, tail, false, &logits, pool));
  }
  // CTranslate2's bound: at most half the positions, and never past the last one.
  const int64_t start_step = static_cast<int64_t>(prompt.size()) - 1;
  const int64_t max_steps = std::min(max_t / 2, max_t - start_step);

  std::vector<WindowResult> all, below_cr;
  for (float temperature : options.temperatures) {
    const int n_hyp = temperature > 0.0f ? std::max(options.best_of, 1) : 1;
    QS_ASSIGN_OR_RETURN(std::vector<Hypothesis> hyps,
                        run_pass(model, ids, options, prompt_state, logits, max_steps, temperature,
                                 n_hyp, rng, pool));
    // Best of the sampled hypotheses by log-probability per token (length penalty 1).
    auto score = [](const Hypothesis& h) {
      return h.sum_logprob / static_cast<double>(std::max<size_t>(h.tokens.size(), 1));
    };
    const Hypothesis& h = *std::max_element(
        hyps.begin(), hyps.end(),
        [&](const Hypothesis& a, const Hypothesis& b) { return score(a) < score(b); });
    WindowResult r = best_shape;
    r.tokens = h.tokens;
    r.avg_logprob = h.sum_logprob / static_cast<double>(h.tokens.size() + 1);
    r.temperature = temperature;
    std::vector<int32_t> text_ids;
    for (int32_t t : r.tokens) {
      if (t < ids.eot) text_ids.push_back(t);
    }
    r.text = strip_text(tokenizer.decode(text_ids, true));
    r.compression_ratio = compression_ratio(r.text);
    all.push_back(r);
    bool fallback = false;
    if (options.compression_ratio_threshold) {
      if (r.compression_ratio > *options.compression_ratio_threshold) {
        fallback = true;  // too repetitive
      } else {
        below_cr.push_back(r);
      }
    }
    if (options.log_prob_threshold && r.avg_logprob < *options.log_prob_threshold) {
      fallback = true;  // too unlikely
    }
    if (options.no_speech_threshold && r.no_speech_prob > *options.no_speech_threshold &&
        options.log_prob_threshold && r.avg_logprob < *options.log_prob_threshold) {
      fallback = false;  // silence: the window will be skipped, not decoded again
    }
    if (!fallback) return r;
  }
  if (all.empty()) return invalid_argument("whisper: no temperature to decode with");
  const std::vector<WindowResult>& pool_of = below_cr.empty() ? all : below_cr;
  WindowResult r = *std::max_element(
      pool_of.begin(), pool_of.end(),
      [](const WindowResult& a, const WindowResult& b) { return a.avg_logprob < b.avg_logprob; });
  r.temperature = options.temperatures.back();
  return r;
}

}  // namespace qs::audio
