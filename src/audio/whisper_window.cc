// audio: one window's decoding as a state machine (see whisper_window.h); the rules are
// whisper_decode.h's, the fallback faster-whisper's generate_with_fallback.
#include "audio/whisper_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qs::audio {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

void log_softmax_row(float* x, int64_t n) {
  float mx = kMinusInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) x[i] -= lse;
}

}  // namespace

WindowDecoder::WindowDecoder(const tok::Tokenizer& tokenizer, const WhisperTokens& ids,
                             const WhisperDecodeOptions& options, std::mt19937_64* rng)
    : tokenizer_(tokenizer), ids_(ids), options_(options), rng_(rng) {}

Result<std::unique_ptr<WindowDecoder>> WindowDecoder::start(
    const WhisperModel& model, const tok::Tokenizer& tokenizer, const WhisperTokens& ids,
    const float* enc, int64_t n_src, const std::vector<int32_t>& prompt,
    const WhisperDecodeOptions& options, std::mt19937_64* rng, ThreadPool& pool) {
  const int64_t max_t = model.config().max_target_positions;
  if (options.temperatures.empty()) {
    return invalid_argument("whisper: no temperature to decode with");
  }
  auto sot_at = std::find(prompt.begin(), prompt.end(), ids.sot);
  if (sot_at == prompt.end()) return invalid_argument("whisper: the prompt has no sot token");
  if (static_cast<int64_t>(prompt.size()) >= max_t) {
    return invalid_argument("whisper: a prompt of " + std::to_string(prompt.size()) +
                            " tokens leaves no room below " + std::to_string(max_t));
  }
  std::unique_ptr<WindowDecoder> w(new WindowDecoder(tokenizer, ids, options, rng));
  w->vocab_ = model.config().vocab_size;
  w->max_initial_id_ =
      ids.timestamp_begin + static_cast<int32_t>(std::lround(options.max_initial_timestamp / 0.02));
  QS_RETURN_IF_ERROR(model.start(enc, n_src, &w->prompt_state_, pool));
  WhisperDecoderState* ps[] = {&w->prompt_state_};
  // The prompt up to <|startoftranscript|> gives the no-speech probability from that
  // position's raw logits; the rest of it (language, task) the first step's logits.
  const std::vector<std::vector<int32_t>> head = {{prompt.begin(), sot_at + 1}};
  QS_RETURN_IF_ERROR(model.decode(ps, head, false, &w->first_logits_, pool));
  {
    std::vector<float> lp(w->first_logits_);
    log_softmax_row(lp.data(), w->vocab_);
    w->no_speech_prob_ = std::exp(static_cast<double>(lp[ids.no_speech]));
  }
  if (sot_at + 1 != prompt.end()) {
    const std::vector<std::vector<int32_t>> tail = {{sot_at + 1, prompt.end()}};
    QS_RETURN_IF_ERROR(model.decode(ps, tail, false, &w->first_logits_, pool));
  }
  // CTranslate2's bound: at most half the positions, and never past the last one.
  const int64_t start_step = static_cast<int64_t>(prompt.size()) - 1;
  w->max_steps_ = std::min(max_t / 2, max_t - start_step);
  w->begin_pass();
  return w;
}

void WindowDecoder::begin_pass() {
  const float t = options_.temperatures[temperature_];
  const int n_hyp = t > 0.0f ? std::max(options_.best_of, 1) : 1;
  hyps_.assign(static_cast<size_t>(n_hyp), Hypothesis{});
  step_ = 0;
  std::vector<float> row;
  for (Hypothesis& h : hyps_) {
    h.state = prompt_state_;
    row = first_logits_;
    step(h, row.data());
  }
  step_ = 1;
  if (std::all_of(hyps_.begin(), hyps_.end(), [](const Hypothesis& h) { return h.done; })) {
    end_pass();
  }
}

void WindowDecoder::pending(std::vector<WhisperDecoderState*>* states,
                            std::vector<std::vector<int32_t>>* tokens) {
  if (done_) return;
  for (Hypothesis& h : hyps_) {
    if (h.done) continue;
    states->push_back(&h.state);
    tokens->push_back({h.tokens.back()});
  }
}

void WindowDecoder::advance(const float* logits) {
  if (done_) return;
  std::vector<float> row(static_cast<size_t>(vocab_));
  int64_t i = 0;
  for (Hypothesis& h : hyps_) {
    if (h.done) continue;
    std::copy_n(logits + i * vocab_, vocab_, row.data());
    step(h, row.data());
    ++i;
  }
  ++step_;
  if (std::all_of(hyps_.begin(), hyps_.end(), [](const Hypothesis& h) { return h.done; })) {
    end_pass();
  }
}

void WindowDecoder::step(Hypothesis& h, float* row) {
  const float t = options_.temperatures[temperature_];
  apply_whisper_rules(ids_, options_, max_initial_id_, h.tokens, row, vocab_);
  log_softmax_row(row, vocab_);
  int32_t next = 0;
  if (t <= 0.0f) {
    next = static_cast<int32_t>(std::max_element(row, row + vocab_) - row);
  } else {
    float mx = kMinusInf;
    for (int64_t i = 0; i < vocab_; ++i) mx = std::max(mx, row[i]);
    std::vector<double> p(static_cast<size_t>(vocab_));
    double sum = 0;
    for (int64_t i = 0; i < vocab_; ++i) {
      p[i] = std::exp(static_cast<double>(row[i] - mx) / t);
      sum += p[i];
    }
    double u = std::uniform_real_distribution<double>(0.0, 1.0)(*rng_) * sum;
    next = static_cast<int32_t>(vocab_ - 1);
    for (int64_t i = 0; i < vocab_; ++i) {
      if (p[i] > 0 && (u -= p[i]) <= 0) {
        next = static_cast<int32_t>(i);
        break;
      }
    }
  }
  h.sum_logprob += row[next];
  if (next == ids_.eot || step_ == max_steps_ - 1) {
    if (next != ids_.eot) h.tokens.push_back(next);
    h.done = true;
  } else {
    h.tokens.push_back(next);
  }
}

void WindowDecoder::end_pass() {
  const float t = options_.temperatures[temperature_];
  // Best of the sampled hypotheses by log-probability per token (length penalty 1).
  auto score = [](const Hypothesis& h) {
    return h.sum_logprob / static_cast<double>(std::max<size_t>(h.tokens.size(), 1));
  };
  const Hypothesis& h = *std::max_element(
      hyps_.begin(), hyps_.end(),
      [&](const Hypothesis& a, const Hypothesis& b) { return score(a) < score(b); });
  WindowResult r;
  r.no_speech_prob = no_speech_prob_;
  r.tokens = h.tokens;
  r.avg_logprob = h.sum_logprob / static_cast<double>(h.tokens.size() + 1);
  r.temperature = t;
  std::vector<int32_t> text_ids;
  for (int32_t id : r.tokens) {
    if (id < ids_.eot) text_ids.push_back(id);
  }
  r.text = strip_whitespace(tokenizer_.decode(text_ids, true));
  r.compression_ratio = compression_ratio(r.text);
  hyps_.clear();  // their caches are the bulk of a window's memory
  all_.push_back(r);
  const WhisperDecodeOptions& o = options_;
  bool fallback = false;
  if (o.compression_ratio_threshold) {
    if (r.compression_ratio > *o.compression_ratio_threshold) {
      fallback = true;  // too repetitive
    } else {
      below_cr_.push_back(r);
    }
  }
  if (o.log_prob_threshold && r.avg_logprob < *o.log_prob_threshold) {
    fallback = true;  // too unlikely
  }
  if (o.no_speech_threshold && r.no_speech_prob > *o.no_speech_threshold && o.log_prob_threshold &&
      r.avg_logprob < *o.log_prob_threshold) {
    fallback = false;  // silence: the window will be skipped, not decoded again
  }
  if (!fallback) {
    final_ = std::move(r);
    done_ = true;
    return;
  }
  if (++temperature_ < o.temperatures.size()) {
    begin_pass();
    return;
  }
  const std::vector<WindowResult>& pool = below_cr_.empty() ? all_ : below_cr_;
  final_ = *std::max_element(
      pool.begin(), pool.end(),
      [](const WindowResult& a, const WindowResult& b) { return a.avg_logprob < b.avg_logprob; });
  final_.temperature = o.temperatures.back();
  done_ = true;
}

}  // namespace qs::audio
