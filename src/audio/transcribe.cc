// audio: the long-audio transcription loop (see transcribe.h), after faster-whisper's
// generate_segments with its defaults (no VAD, no word timestamps, one clip).
#include "audio/transcribe.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "audio/log_mel.h"
#include "audio/whisper_window.h"
#include "core/json.h"

namespace qs::audio {

namespace {

constexpr double kTimePrecision = 0.02;  // seconds per timestamp token
constexpr int64_t kInputStride = 2;      // input frames per encoder row (conv2's stride)

Result<std::vector<int32_t>> int_list(const nlohmann::json& j, const char* key,
                                      const std::string& source) {
  std::vector<int32_t> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_array()) return invalid_argument(source + ": '" + key + "' is not a list");
  for (const auto& v : j[key]) {
    if (!v.is_number_integer()) {
      return invalid_argument(source + ": '" + key + "' holds a non-integer");
    }
    out.push_back(v.get<int32_t>());
  }
  return out;
}

std::string text_of(const tok::Tokenizer& t, const WhisperTokens& ids,
                    const std::vector<int32_t>& tokens) {
  std::vector<int32_t> text;
  for (int32_t id : tokens) {
    if (id < ids.eot) text.push_back(id);
  }
  return t.decode(text, true);
}

}  // namespace

std::string Transcript::text() const {
  std::string all;
  for (const TranscriptSegment& s : segments) all += s.text;
  return strip_whitespace(all);
}

WindowSplit split_by_timestamps(const WhisperTokens& ids, const std::vector<int32_t>& tokens,
                                double time_offset, int64_t segment_size, double segment_duration,
                                int64_t seek) {
  WindowSplit out;
  const int32_t tb = ids.timestamp_begin;
  const size_t n = tokens.size();
  const bool single_ending = n >= 2 && tokens[n - 2] < tb && tokens[n - 1] >= tb;
  std::vector<size_t> slices;
  for (size_t i = 1; i < n; ++i) {
    if (tokens[i] >= tb && tokens[i - 1] >= tb) slices.push_back(i);
  }
  if (!slices.empty()) {
    if (single_ending) slices.push_back(n);
    size_t last = 0;
    for (size_t cut : slices) {
      TranscriptSegment s;
      s.seek = seek;
      s.tokens.assign(tokens.begin() + last, tokens.begin() + cut);
      s.start = time_offset + (s.tokens.front() - tb) * kTimePrecision;
      s.end = time_offset + (s.tokens.back() - tb) * kTimePrecision;
      out.segments.push_back(std::move(s));
      last = cut;
    }
    if (single_ending) {
      out.next_seek = seek + segment_size;
    } else {
      out.next_seek = seek + (tokens[last - 1] - tb) * kInputStride;
    }
  } else {
    double duration = segment_duration;
    int32_t last_ts = -1;
    for (int32_t t : tokens) {
      if (t >= tb) last_ts = t;
    }
    if (last_ts >= 0 && last_ts != tb) duration = (last_ts - tb) * kTimePrecision;
    TranscriptSegment s;
    s.seek = seek;
    s.start = time_offset;
    s.end = time_offset + duration;
    s.tokens = tokens;
    out.segments.push_back(std::move(s));
    out.next_seek = seek + segment_size;
  }
  return out;
}

Result<WhisperTranscriber> WhisperTranscriber::load(const std::string& dir,
                                                    LinearObserver observer) {
  WhisperTranscriber w;
  QS_ASSIGN_OR_RETURN(WhisperModel model, WhisperModel::load(dir));
  model.set_linear_observer(std::move(observer));
  w.model_ = std::make_shared<const WhisperModel>(std::move(model));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> t, tok::load_tokenizer(dir));
  w.tokenizer_ = std::move(t);
  QS_ASSIGN_OR_RETURN(w.ids_, resolve_whisper_tokens(*w.tokenizer_, w.model_->config().vocab_size));
  QS_ASSIGN_OR_RETURN(w.mel_, load_log_mel_config(dir));
  const WhisperConfig& c = w.model_->config();
  if (w.mel_.n_mels != c.num_mel_bins || w.mel_.nb_max_frames != c.input_frames()) {
    return invalid_argument(
        dir + ": preprocessor_config.json gives " + std::to_string(w.mel_.n_mels) + " mel bins x " +
        std::to_string(w.mel_.nb_max_frames) + " frames, the model takes " +
        std::to_string(c.num_mel_bins) + " x " + std::to_string(c.input_frames()));
  }
  const std::string gen = (std::filesystem::path(dir) / "generation_config.json").string();
  nlohmann::json g = nlohmann::json::object();
  if (std::filesystem::exists(gen)) {
    QS_ASSIGN_OR_RETURN(g, read_json(gen));
    if (!g.is_object()) return invalid_argument(gen + ": not a JSON object");
  }
  if (g.contains("is_multilingual") && g["is_multilingual"].is_boolean()) {
    w.ids_.multilingual = g["is_multilingual"].get<bool>() && !w.ids_.languages.empty();
  }
  QS_ASSIGN_OR_RETURN(std::vector<int32_t> suppress, int_list(g, "suppress_tokens", gen));
  QS_ASSIGN_OR_RETURN(w.begin_suppress_tokens_, int_list(g, "begin_suppress_tokens", gen));
  // As faster-whisper adds them: the task and prompt tokens are never text.
  const WhisperTokens& i = w.ids_;
  for (int32_t id : {i.transcribe, i.translate, i.sot, i.sot_prev, i.sot_lm, i.no_speech}) {
    suppress.push_back(id);
  }
  std::set<int32_t> unique(suppress.begin(), suppress.end());
  w.suppress_tokens_.assign(unique.begin(), unique.end());
  return w;
}

TranscribeOptions WhisperTranscriber::default_options() const {
  TranscribeOptions o;
  o.decode.suppress_tokens = suppress_tokens_;
  o.decode.begin_suppress_tokens = begin_suppress_tokens_;
  return o;
}

Result<std::string> WhisperTranscriber::detect_language(const float* enc, ThreadPool& pool) const {
  if (!ids_.multilingual) return std::string("en");
  WhisperDecoderState s;
  QS_RETURN_IF_ERROR(model_->start(enc, model_->config().max_source_positions, &s, pool));
  WhisperDecoderState* states[] = {&s};
  const std::vector<std::vector<int32_t>> sot = {{ids_.sot}};
  std::vector<float> logits;
  QS_RETURN_IF_ERROR(model_->decode(states, sot, false, &logits, pool));
  std::string best;
  float best_logit = 0;
  for (const auto& [code, id] : ids_.languages) {
    if (best.empty() || logits[id] > best_logit) {
      best = code;
      best_logit = logits[id];
    }
  }
  return best;
}

Result<std::unique_ptr<TranscriptionTask>> TranscriptionTask::start(
    const WhisperTranscriber& w, const std::vector<float>& samples,
    const TranscribeOptions& options, ThreadPool& pool) {
  std::unique_ptr<TranscriptionTask> t(new TranscriptionTask(w, options));
  const LogMelConfig& mel = w.mel_config();
  QS_ASSIGN_OR_RETURN(t->mel_, whisper_features_whole(samples, mel.hop_length, mel));
  t->content_frames_ = t->mel_.n_frames - 1;
  t->out_.task = options.task;
  t->out_.duration = static_cast<double>(samples.size()) / static_cast<double>(mel.sample_rate);
  t->out_.language = options.language;
  const WhisperTokens& ids = w.tokens();
  if (t->out_.language.empty()) {
    if (ids.multilingual && t->content_frames_ > 0) {
      QS_RETURN_IF_ERROR(t->encode_at(0, std::min(mel.nb_max_frames, t->content_frames_), pool));
      QS_ASSIGN_OR_RETURN(t->out_.language, w.detect_language(t->enc_.data(), pool));
    } else {
      t->out_.language = "en";
    }
  }
  if (!ids.multilingual) t->out_.language = "en";
  QS_ASSIGN_OR_RETURN(t->sot_seq_, ids.sot_sequence(t->out_.language, options.task));
  if (!strip_whitespace(options.initial_prompt).empty()) {
    t->all_tokens_ = w.tokenizer().encode(" " + strip_whitespace(options.initial_prompt), false);
  }
  return t;
}

TranscriptionTask::TranscriptionTask(const WhisperTranscriber& w, const TranscribeOptions& o)
    : w_(w), options_(o), rng_(o.decode.seed) {}

Status TranscriptionTask::encode_at(int64_t seek, int64_t size, ThreadPool& pool) {
  const int64_t window = w_.mel_config().nb_max_frames, n_mels = mel_.n_mels;
  segment_.assign(static_cast<size_t>(n_mels * window), 0.0f);  // pad_or_trim's zeros
  for (int64_t m = 0; m < n_mels; ++m) {
    std::copy_n(mel_.values.data() + m * mel_.n_frames + seek, size, segment_.data() + m * window);
  }
  return w_.model().encode(segment_.data(), &enc_, pool);
}

Status TranscriptionTask::open_window(ThreadPool& pool) {
  if (window_ || done_) return ok_status();
  if (seek_ >= content_frames_) {
    done_ = true;
    return ok_status();
  }
  const WhisperConfig& c = w_.model().config();
  const WhisperTokens& ids = w_.tokens();
  segment_size_ = std::min(w_.mel_config().nb_max_frames, content_frames_ - seek_);
  QS_RETURN_IF_ERROR(encode_at(seek_, segment_size_, pool));
  std::vector<int32_t> prompt;
  const size_t max_previous = static_cast<size_t>(c.max_target_positions / 2 - 1);
  if (all_tokens_.size() > prompt_reset_since_) {
    prompt.push_back(ids.sot_prev);
    const size_t n = std::min(all_tokens_.size() - prompt_reset_since_, max_previous);
    prompt.insert(prompt.end(), all_tokens_.end() - n, all_tokens_.end());
  }
  prompt.insert(prompt.end(), sot_seq_.begin(), sot_seq_.end());
  if (options_.decode.without_timestamps) prompt.push_back(ids.no_timestamps);
  QS_ASSIGN_OR_RETURN(
      window_, WindowDecoder::start(w_.model(), w_.tokenizer(), ids, enc_.data(),
                                    c.max_source_positions, prompt, options_.decode, &rng_, pool));
  return ok_status();
}

void TranscriptionTask::close_window() {
  if (!window_ || !window_->done()) return;
  const WindowResult r = window_->result();
  window_.reset();
  const LogMelConfig& mel = w_.mel_config();
  const double time_per_frame =
      static_cast<double>(mel.hop_length) / static_cast<double>(mel.sample_rate);
  const WhisperDecodeOptions& d = options_.decode;
  if (d.no_speech_threshold) {
    bool skip = r.no_speech_prob > *d.no_speech_threshold;
    if (d.log_prob_threshold && r.avg_logprob > *d.log_prob_threshold) skip = false;
    if (skip) {
      seek_ += segment_size_;
      return;
    }
  }
  const int64_t previous_seek = seek_;
  WindowSplit split = split_by_timestamps(
      w_.tokens(), r.tokens, static_cast<double>(seek_) * time_per_frame, segment_size_,
      static_cast<double>(segment_size_) * time_per_frame, seek_);
  // A window whose only complete pair sits at 0.00 would start the next one where it
  // started (faster-whisper would loop on it forever); move on by the window instead.
  seek_ = split.next_seek > seek_ ? split.next_seek : seek_ + segment_size_;
  for (TranscriptSegment& s : split.segments) {
    s.text = text_of(w_.tokenizer(), w_.tokens(), s.tokens);
    if (s.start == s.end || strip_whitespace(s.text).empty()) continue;
    all_tokens_.insert(all_tokens_.end(), s.tokens.begin(), s.tokens.end());
    s.id = static_cast<int64_t>(out_.segments.size()) + 1;
    s.seek = previous_seek;
    s.temperature = r.temperature;
    s.avg_logprob = r.avg_logprob;
    s.compression_ratio = r.compression_ratio;
    s.no_speech_prob = r.no_speech_prob;
    out_.segments.push_back(std::move(s));
  }
  if (!options_.condition_on_previous_text ||
      r.temperature > options_.prompt_reset_on_temperature) {
    prompt_reset_since_ = all_tokens_.size();
  }
}

Result<Transcript> WhisperTranscriber::transcribe(const std::vector<float>& samples,
                                                  const TranscribeOptions& options,
                                                  ThreadPool& pool) const {
  QS_ASSIGN_OR_RETURN(std::unique_ptr<TranscriptionTask> task,
                      TranscriptionTask::start(*this, samples, options, pool));
  std::vector<WhisperDecoderState*> states;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> logits;
  for (;;) {
    QS_RETURN_IF_ERROR(task->open_window(pool));
    if (task->done()) break;
    WindowDecoder& w = *task->window();
    while (!w.done()) {
      states.clear();
      tokens.clear();
      w.pending(&states, &tokens);
      QS_RETURN_IF_ERROR(model_->decode(states, tokens, false, &logits, pool));
      w.advance(logits.data());
    }
    task->close_window();
  }
  return task->take_result();
}

}  // namespace qs::audio
