// engine: Engine (see engine.h).
#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "core/check.h"
#include "core/log.h"
#include "engine/memory_budget.h"

namespace qs::engine {

// One unfinished request: its sequence (tokens and blocks) and its per-request state.
struct Engine::Request {
  Request(EngineRequest r, const tok::Tokenizer* tokenizer, const std::vector<int32_t>& eos)
      : params(r.params), sampler(r.params), stop_checker(r.params, eos) {
    seq.id = std::move(r.id);
    seq.tokens = std::move(r.prompt_ids);
    seq.n_prompt = static_cast<int64_t>(seq.tokens.size());
    if (tokenizer != nullptr) output.emplace(*tokenizer, params, seq.tokens, eos);
    items = std::move(r.mm_items);
  }

  int64_t n_output() const { return static_cast<int64_t>(seq.tokens.size()) - seq.n_prompt; }

  Sequence seq;
  SamplingParams params;
  Sampler sampler;
  // Text, stop strings and finish decisions; absent without a tokenizer, where stop_checker
  // and max_tokens decide alone.
  std::optional<OutputProcessor> output;
  StopChecker stop_checker;
  bool counted_prompt = false;  // prompt tokens added to the stats
  // Images, videos and clips; per item its span's end and its embeddings once encoded
  // [rows, hidden], its vision rows then its audio rows; the prompt ranges those rows fill (a
  // plain item's span is one range, a video with its sound track has one per chunk and
  // stream); and for an M-RoPE model the prompt's 3-D positions and the delta its generated
  // tokens add on every axis. An item is encoded when a chunk first reaches its span, so one
  // whose rows the prefix cache holds is never encoded at all.
  std::vector<models::MultimodalItem> items;
  std::vector<int64_t> item_ends;
  std::vector<std::vector<float>> item_rows;  // empty: not encoded
  struct EmbedRun {
    int64_t begin = 0, end = 0;  // prompt positions [begin, end)
    size_t item = 0;             // take item_rows[item] rows [row, row + end - begin)
    int64_t row = 0;
  };
  std::vector<EmbedRun> embed_runs;
  bool items_scheduled = false;  // its first chunk counted the items the prefix cache held
  std::vector<int32_t> mrope;    // [3 * n_prompt]; empty: each axis at the 1-D position
  int32_t rope_delta = 0;
};

Result<std::unique_ptr<Engine>> Engine::create(const models::Model& model,
                                               const tok::Tokenizer* tokenizer,
                                               std::vector<int32_t> eos_ids, ThreadPool& pool,
                                               const EngineConfig& config) {
  const models::ModelConfig& c = model.config();
  EngineConfig cfg = config;
  if (cfg.max_model_len == 0) cfg.max_model_len = c.max_position_embeddings;
  if (cfg.block_size < 1 || cfg.max_num_seqs < 1 || cfg.max_num_batched_tokens < 1 ||
      cfg.max_model_len < 1 || cfg.kv_cache_bytes < 0) {
    return invalid_argument(
        "engine: block_size, max_num_seqs, max_num_batched_tokens and max_model_len must be "
        "positive and kv_cache_bytes not negative");
  }
  if (cfg.max_model_len > c.max_position_embeddings) {
    QS_LOG_WARN(
        "engine: max_model_len %lld is larger than the model's max_position_embeddings %lld; "
        "requests that reach past it will fail",
        static_cast<long long>(cfg.max_model_len),
        static_cast<long long>(c.max_position_embeddings));
  }
  KvCacheConfig kv;
  kv.n_layers = c.n_layers;
  // Under tensor parallelism this rank's KV heads: each rank holds its heads' share of every
  // block, and kv_cache_bytes is one rank's budget.
  kv.n_kv_heads = model.local_config().n_kv_heads;
  kv.head_dim = c.head_dim;
  kv.block_size = cfg.block_size;
  if (!ops::kv_cache_dtype_supported(cfg.kv_cache_dtype)) {
    return invalid_argument(std::string("engine: no KV cache of dtype ") +
                            dtype_name(cfg.kv_cache_dtype));
  }
  kv.dtype = cfg.kv_cache_dtype;
  const bool fp8 = kv.dtype == DType::kF8E4M3 || kv.dtype == DType::kF8E5M2;
  // vLLM: with an `auto` (here also bf16) cache the checkpoint's scales are forced to 1.0.
  if (fp8) {
    const models::KvCacheScales& scales = model.kv_cache_scales();
    if (static_cast<int64_t>(scales.k.size()) == c.n_layers) {
      kv.k_scales = scales.k;
      kv.v_scales = scales.v;
    }
    if (scales.n_from_checkpoint == 0) {
      QS_LOG_WARN(
          "engine: the checkpoint has no KV-cache scales; the %s cache uses k_scale = v_scale = "
          "1.0 (as vLLM does), which may cost accuracy",
          kv_cache_dtype_name(kv.dtype));
    } else {
      QS_LOG_INFO("engine: KV-cache scales from the checkpoint for %lld of %lld layers",
                  static_cast<long long>(scales.n_from_checkpoint),
                  static_cast<long long>(c.n_layers));
    }
  }
  const int64_t block_bytes =
      kv_cache_bytes_per_token(model.local_config(), kv.dtype) * cfg.block_size;
  kv.n_blocks = cfg.kv_cache_bytes / block_bytes;
  const int64_t need_blocks = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
  if (kv.n_blocks < need_blocks) {
    return out_of_range("engine: a KV cache of " + std::to_string(cfg.kv_cache_bytes) +
                        " bytes holds " + std::to_string(kv.n_blocks * cfg.block_size) +
                        " tokens, fewer than one request of max_model_len " +
                        std::to_string(cfg.max_model_len) + " needs (" +
                        std::to_string(need_blocks * block_bytes) +
                        " bytes); give it more memory or lower max_model_len");
  }
  QS_LOG_INFO(
      "engine: KV cache (%s, %s) %lld blocks x %lld tokens = %lld tokens (%.1f MiB); maximum "
      "concurrency for %lld tokens per request: %.2fx",
      kv_cache_dtype_name(kv.dtype), dtype_name(kv.dtype), static_cast<long long>(kv.n_blocks),
      static_cast<long long>(cfg.block_size), static_cast<long long>(kv.n_blocks * cfg.block_size),
      static_cast<double>(kv.n_blocks * block_bytes) / (1 << 20),
      static_cast<long long>(cfg.max_model_len),
      static_cast<double>(kv.n_blocks * cfg.block_size) / cfg.max_model_len);
  if (dist::Communicator* tp = model.tensor_parallel()) {
    // The other ranks allocate the same blocks, so that rank 0's block tables hold there too.
    QS_RETURN_IF_ERROR(send_cache(*tp, kv).with_context("tensor parallel"));
    QS_LOG_INFO("engine: tensor parallel over %d ranks (%s)", tp->size(), tp->describe().c_str());
  }
  return std::unique_ptr<Engine>(new Engine(model, tokenizer, std::move(eos_ids), pool, cfg, kv));
}

Engine::Engine(const models::Model& model, const tok::Tokenizer* tokenizer,
               std::vector<int32_t> eos_ids, ThreadPool& pool, const EngineConfig& config,
               const KvCacheConfig& kv_config)
    : model_(model),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      pool_(pool),
      config_(config),
      cache_(kv_config, model.backend()),
      scheduler_(SchedulerConfig{kv_config.n_blocks, config.block_size, config.max_num_seqs,
                                 config.max_num_batched_tokens, config.max_model_len,
                                 config.enable_prefix_caching}) {}

Engine::~Engine() = default;

Status Engine::heartbeat() {
  dist::Communicator* tp = model_.tensor_parallel();
  if (tp == nullptr || !broken_.ok()) return broken_;
  Status s = ping(*tp);
  if (!s.ok()) {
    broken_ = s.code() == StatusCode::kUnavailable ? s : unavailable(s.message());
    QS_LOG_ERROR("engine: %s", broken_.message().c_str());
  }
  return broken_;
}

Status Engine::forward(const models::ForwardBatch& batch, std::vector<float>* logits) {
  if (!broken_.ok()) return broken_;
  Status s;
  if (dist::Communicator* tp = model_.tensor_parallel()) {
    s = send_batch(*tp, batch, model_.config().hidden_size);
  }
  if (s.ok()) s = model_.forward(batch, cache_.layers(), pool_, logits);
  if (s.code() == StatusCode::kUnavailable) {
    // A rank died or stopped answering: the group cannot compute again.
    broken_ = s;
    QS_LOG_ERROR("engine: %s; failing every request", s.message().c_str());
  }
  return s;
}

Status Engine::validate(const EngineRequest& r) const {
  const int64_t vocab = model_.config().vocab_size;
  const std::string where = "request " + r.id;
  QS_RETURN_IF_ERROR(r.params.validate(vocab).with_context(where));
  if (r.prompt_ids.empty()) return invalid_argument(where + ": the prompt has no tokens");
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= vocab) {
      // Names where the bound comes from: from the CLI this is a tokenizer that disagrees
      // with the checkpoint's config.
      return invalid_argument(where + ": prompt token id " + std::to_string(id) +
                              " outside the vocabulary of " + std::to_string(vocab) +
                              " (config.json vocab_size)");
    }
  }
  if (tokenizer_ == nullptr && !r.params.stop.empty()) {
    return invalid_argument(where + ": stop strings need a tokenizer; this engine has none");
  }
  QS_RETURN_IF_ERROR(validate_items(r).with_context(where));
  return scheduler_.check_fits(static_cast<int64_t>(r.prompt_ids.size())).with_context(where);
}

Status Engine::validate_items(const EngineRequest& r) const {
  if (r.mm_items.empty()) return ok_status();
  const models::ModelConfig& c = model_.config();
  int64_t after = 0;  // items come in prompt order, apart
  for (const models::MultimodalItem& it : r.mm_items) {
    if (it.audio && it.video) return invalid_argument("an item that is both audio and video");
    const bool sound = it.audio || it.audio_in_video();
    if (sound) {
      if (config_.audio == nullptr) {
        return invalid_argument("the model takes no audio (it has no audio tower)");
      }
      const int64_t values = it.features ? static_cast<int64_t>(it.features->size()) : 0;
      if (it.frames < 1 || it.frames > values || values != it.frames * config_.audio->n_mels()) {
        return invalid_argument("a sound clip whose features do not fill its frames");
      }
    }
    if (!it.audio && config_.vision == nullptr) {
      return invalid_argument("the model takes no images or videos (it has no vision tower)");
    }
    const models::MropeItem m = it.mrope_item(sound ? config_.audio->tokens(it.frames) : 0);
    const int64_t lead = it.audio_in_video() ? 2 : 0;  // <|vision_bos|><|audio_bos|>
    if (it.offset - lead < after) {
      return invalid_argument("the prompt's items overlap or are out of prompt order");
    }
    QS_RETURN_IF_ERROR(models::check_placeholders(r.prompt_ids, c, m));
    if (!it.audio) {  // the grid is checked: the product is small
      const int64_t values = it.grid.t * it.grid.h * it.grid.w * config_.vision->patch_values();
      if (!it.pixels || static_cast<int64_t>(it.pixels->size()) != values) {
        return invalid_argument("an image or video whose pixel values do not fill its grid");
      }
    }
    after = it.offset + m.span(c.vision_merge_size) + lead;
  }
  return ok_status();
}

Status Engine::add_request(EngineRequest request) {
  if (!broken_.ok()) return broken_;
  QS_RETURN_IF_ERROR(validate(request));
  if (requests_.count(request.id) > 0 ||
      std::any_of(pending_.begin(), pending_.end(),
                  [&](const RequestOutput& o) { return o.id == request.id; })) {
    return invalid_argument("request id '" + request.id + "' is already in use");
  }
  const std::string id = request.id;
  auto r = std::make_unique<Request>(std::move(request), tokenizer_, eos_ids_);
  Request* raw = r.get();
  if (!raw->items.empty()) {
    const models::ModelConfig& c = model_.config();
    const std::vector<int32_t>& ids = raw->seq.tokens;
    std::vector<models::MropeItem> placed;
    raw->item_rows.resize(raw->items.size());
    for (size_t i = 0; i < raw->items.size(); ++i) {
      const models::MultimodalItem& it = raw->items[i];
      const bool sound = it.audio || it.audio_in_video();
      placed.push_back(it.mrope_item(sound ? config_.audio->tokens(it.frames) : 0));
      const int64_t end = it.offset + placed.back().span(c.vision_merge_size);
      raw->item_ends.push_back(end);
      // A block that overlaps the span is keyed by the item's hash.
      raw->seq.content.push_back({it.offset, end, it.hash});
      // The k-th placeholder of each stream in the span takes that stream's k-th row.
      int64_t vision_row = 0, audio_row = it.audio ? 0 : it.grid.tokens(c.vision_merge_size);
      for (int64_t j = it.offset; j < end;) {
        int64_t e = j + 1;
        while (e < end && ids[e] == ids[j]) ++e;
        int64_t& next = ids[j] == c.audio_token_id ? audio_row : vision_row;
        raw->embed_runs.push_back({j, e, i, next});
        next += e - j;
        j = e;
      }
    }
    if (!c.mrope_section.empty()) {
      auto p = models::mrope_positions(ids, c, placed);
      if (!p.ok()) return p.status().with_context("request " + id);
      raw->mrope = std::move(p->positions);
      raw->rope_delta = p->delta;
    }
  }
  requests_.emplace(id, std::move(r));
  scheduler_.add(&raw->seq);
  return ok_status();
}

RequestOutput Engine::new_output(const Request& r) const {
  RequestOutput out;
  out.id = r.seq.id;
  out.num_prompt_tokens = r.seq.n_prompt;
  out.num_cached_tokens = std::max<int64_t>(r.seq.n_cached_tokens, 0);
  return out;
}

void Engine::finish(Request& r, const std::string& reason, RequestOutput* out) {
  scheduler_.finish(&r.seq);
  out->finished = true;
  out->finish_reason = reason;
  if (reason == "stop") {
    ++stats_.finished_stop;
  } else if (reason == "length") {
    ++stats_.finished_length;
  } else {
    ++stats_.finished_abort;
  }
}

void Engine::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  RequestOutput out = new_output(*it->second);
  finish(*it->second, "abort", &out);
  pending_.push_back(std::move(out));
  requests_.erase(it);
}

void Engine::abort_all() {
  std::vector<std::string> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (const auto& id : ids) abort(id);
}

int32_t Engine::draw(Request& r, float* logits) const {
  const int64_t vocab = model_.config().vocab_size;
  const std::span<const int32_t> all(r.seq.tokens);
  if (r.n_output() < r.params.min_tokens) {
    // vLLM's min_tokens logits processor: no EOS or stop token until then.
    const float neg_inf = -std::numeric_limits<float>::infinity();
    if (!r.params.ignore_eos) {
      for (int32_t id : eos_ids_) {
        if (id >= 0 && id < vocab) logits[id] = neg_inf;
      }
    }
    for (int32_t id : r.params.stop_token_ids) logits[id] = neg_inf;
  }
  return r.sampler.sample(logits, vocab, all.subspan(0, r.seq.n_prompt),
                          all.subspan(r.seq.n_prompt));
}

void Engine::sample(Request& r, float* logits, RequestOutput* out, int32_t drawn) {
  const int64_t vocab = model_.config().vocab_size;
  std::optional<SampleLogprobs> lp;
  double lse = 0.0;
  if (r.params.logprobs) {
    QS_CHECK_MSG(drawn < 0, "a request with logprobs draws its token here, after them");
    // Raw logprobs (vLLM's default logprobs_mode): log_softmax of the model's logits, before
    // anything below changes them.
    float max_l = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < vocab; ++i) max_l = std::max(max_l, logits[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_l);
    lse = max_l + std::log(sum);
    scratch_.assign(logits, logits + vocab);
    lp.emplace();
    const int64_t n_top = std::min<int64_t>(*r.params.logprobs, vocab);
    std::vector<int32_t>& ids = scratch_ids_;
    ids.resize(vocab);
    for (int64_t i = 0; i < vocab; ++i) ids[i] = static_cast<int32_t>(i);
    auto better = [&](int32_t a, int32_t b) {
      return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + n_top, ids.end(), better);
    for (int64_t k = 0; k < n_top; ++k) {
      lp->top.push_back({ids[k], static_cast<float>(scratch_[ids[k]] - lse)});
    }
  }
  const int32_t token = drawn >= 0 ? drawn : draw(r, logits);
  r.seq.tokens.push_back(token);
  ++stats_.generation_tokens;
  out->new_token_ids.push_back(token);
  if (lp) {
    lp->sampled = {token, static_cast<float>(scratch_[token] - lse)};
    out->logprobs.push_back(std::move(*lp));
  }

  StepOutput step;
  if (r.output) {
    step = r.output->append(token);
    out->stop_token_id = r.output->stop_token_id();
    out->stop_string = r.output->stop_string();
  } else if (r.n_output() >= r.params.min_tokens && r.stop_checker.stops_on(token)) {
    step.finished = true;
    step.finish_reason = "stop";
    if (r.stop_checker.is_stop_token_id(token)) out->stop_token_id = token;
  } else if (r.n_output() >= r.params.max_tokens) {
    step.finished = true;
    step.finish_reason = "length";
  }
  if (!step.finished && static_cast<int64_t>(r.seq.tokens.size()) >= config_.max_model_len) {
    // The context is full: the next token would have no position.
    step.finish_reason = "length";
    step.finished = true;
    if (r.output) step.text += r.output->finish("length").text;
  }
  out->new_text += step.text;
  if (step.finished) finish(r, step.finish_reason, out);
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  const SchedulerOutput plan = scheduler_.schedule();
  if (plan.chunks.empty()) return outputs;
  const int64_t vocab = model_.config().vocab_size;

  // Images, videos and clips are encoded when a chunk first reaches their span (never, when
  // the prefix cache holds it); a request whose encoding fails is aborted after this step (its
  // chunk runs on the placeholders' own embeddings meanwhile, so the batch's rows stay one per
  // chunk).
  std::vector<Status> chunk_status(plan.chunks.size());
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& ch = plan.chunks[i];
    Request& r = *requests_.at(ch.seq->id);
    if (r.items.empty()) continue;
    if (!r.items_scheduled) {
      r.items_scheduled = true;
      for (const int64_t end : r.item_ends) stats_.mm_items_cached += end <= ch.start_pos ? 1 : 0;
    }
    chunk_status[i] = encode_items(r, ch.start_pos, ch.start_pos + ch.n_tokens);
  }
  models::ForwardBatch batch = make_batch(plan.chunks);
  const int64_t n_rows = static_cast<int64_t>(batch.token_ids.size());
  models::ForwardBatch::MoeCounts moe;
  batch.moe_counts = &moe;
  Status batch_status = forward(batch, &logits_);
  stats_.moe_routed_slots += moe.routed_slots;
  stats_.moe_expert_reads += moe.expert_reads;
  ++stats_.steps;
  stats_.computed_tokens += n_rows;
  if (!batch_status.ok()) {
    // Find the culprit(s): run every chunk alone, so that one request's error (e.g. a
    // position past the model's context) fails that request only. Each rewrites only its own
    // K/V slots, so what the failed batch wrote is overwritten.
    std::vector<float> all(plan.chunks.size() * vocab), row;
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      if (!chunk_status[i].ok()) continue;
      models::ForwardBatch one = make_batch({&plan.chunks[i], 1});
      chunk_status[i] = forward(one, &row);
      if (chunk_status[i].ok()) std::copy(row.begin(), row.end(), all.begin() + i * vocab);
    }
    logits_ = std::move(all);
  }

  // Commit every chunk first and find the rows that sample: their draws (a softmax over the
  // vocabulary each when they sample at temperature > 0) run on the pool, one row per task,
  // and are then recorded in chunk order. Requests that want logprobs draw in that second,
  // serial pass, after their logprobs are taken from the raw logits.
  struct Row {
    Request* r = nullptr;
    bool samples = false;
    int32_t drawn = -1;
  };
  std::vector<Row> rows(plan.chunks.size());
  std::vector<size_t> parallel;  // indices into rows
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& ch = plan.chunks[i];
    Row& row = rows[i];
    row.r = requests_.at(ch.seq->id).get();
    if (!chunk_status[i].ok()) continue;
    scheduler_.commit(ch);
    // A chunk that ends before the last token only fills the cache; no logits are used.
    row.samples = row.r->seq.n_computed >= static_cast<int64_t>(row.r->seq.tokens.size());
    if (row.samples && !row.r->params.logprobs) parallel.push_back(i);
  }
  pool_.parallel_for(static_cast<int64_t>(parallel.size()), [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      Row& row = rows[parallel[j]];
      row.drawn = draw(*row.r, logits_.data() + parallel[j] * vocab);
    }
  });

  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    Request& r = *rows[i].r;
    RequestOutput out = new_output(r);
    if (!r.counted_prompt) {
      r.counted_prompt = true;
      stats_.prompt_tokens += r.seq.n_prompt;
    }
    if (!chunk_status[i].ok()) {
      out.error = chunk_status[i].with_context("request " + r.seq.id);
      QS_LOG_ERROR("engine: %s", out.error.message().c_str());
      finish(r, "abort", &out);
    } else if (rows[i].samples) {
      sample(r, logits_.data() + i * vocab, &out, rows[i].drawn);
    } else {
      continue;
    }
    const bool done = out.finished;
    outputs.push_back(std::move(out));
    if (done) requests_.erase(outputs.back().id);
  }
  if (!broken_.ok()) {
    // The requests this step did not run fail too: nothing can run them any more.
    for (auto& [id, r] : requests_) {
      RequestOutput out = new_output(*r);
      out.error = broken_.with_context("request " + id);
      finish(*r, "abort", &out);
      outputs.push_back(std::move(out));
    }
    requests_.clear();
  }
  return outputs;
}

Status Engine::encode_items(Request& r, int64_t lo, int64_t hi) {
  const int64_t hidden = model_.config().hidden_size, m = model_.config().vision_merge_size;
  for (size_t i = 0; i < r.items.size(); ++i) {
    models::MultimodalItem& it = r.items[i];
    if (!r.item_rows[i].empty() || r.item_ends[i] <= lo || it.offset >= hi) continue;
    if (!it.pixels && !it.features) {
      return internal_error("an item's inputs are gone before it was encoded");
    }
    // The item's vision rows then its audio rows: the order embed_runs counts. Kept aside until
    // both are there, so that a failed item never scatters a partial set.
    std::vector<float> out, rows;
    auto append = [&](int64_t n) -> Status {
      if (static_cast<int64_t>(out.size()) != n * hidden) {
        return internal_error("an encoder's output does not fill its placeholders");
      }
      rows.insert(rows.end(), out.begin(), out.end());
      return ok_status();
    };
    if (!it.audio) {
      const models::VisionGrid grid[] = {it.grid};
      QS_RETURN_IF_ERROR(config_.vision->encode(it.pixels->data(), grid, &out, pool_));
      QS_RETURN_IF_ERROR(append(it.grid.tokens(m)));
    }
    if (it.audio || it.audio_in_video()) {
      QS_RETURN_IF_ERROR(config_.audio->encode(it.features->data(), it.frames, &out, pool_));
      QS_RETURN_IF_ERROR(append(config_.audio->tokens(it.frames)));
    }
    r.item_rows[i] = std::move(rows);
    it.pixels.reset();  // encoded: drop the inputs
    it.features.reset();
    ++stats_.mm_items_encoded;
  }
  return ok_status();
}

models::ForwardBatch Engine::make_batch(std::span<const ScheduledChunk> chunks) const {
  models::ForwardBatch batch;
  std::vector<int32_t> rows3;  // [n_tokens][3] for an M-RoPE model
  for (const ScheduledChunk& ch : chunks) add_chunk(ch, *requests_.at(ch.seq->id), &batch, &rows3);
  if (!model_.config().mrope_section.empty()) {
    const int64_t n = static_cast<int64_t>(batch.token_ids.size());
    batch.mrope_positions.resize(3 * n);
    for (int64_t t = 0; t < n; ++t) {
      for (int a = 0; a < 3; ++a) batch.mrope_positions[a * n + t] = rows3[t * 3 + a];
    }
  }
  return batch;
}

void Engine::add_chunk(const ScheduledChunk& ch, const Request& r, models::ForwardBatch* batch,
                       std::vector<int32_t>* rows3) const {
  ops::AttentionSeq s;
  s.query_start = static_cast<int64_t>(batch->token_ids.size());
  s.n_query = ch.n_tokens;
  s.start_pos = ch.start_pos;
  s.block_table = ch.seq->block_table;
  batch->seqs.push_back(s);
  const auto first = ch.seq->tokens.begin() + ch.start_pos;
  batch->token_ids.insert(batch->token_ids.end(), first, first + ch.n_tokens);
  const int64_t hidden = model_.config().hidden_size, lo = ch.start_pos, hi = lo + ch.n_tokens;
  for (const Request::EmbedRun& run : r.embed_runs) {
    const int64_t a = std::max(run.begin, lo), b = std::min(run.end, hi);
    const std::vector<float>& rows = r.item_rows[run.item];
    if (a < b && !rows.empty()) {  // empty: its encoding failed, and so does this chunk
      batch->embeddings.push_back(
          {s.query_start + (a - lo), b - a, rows.data() + (run.row + a - run.begin) * hidden});
    }
  }
  if (model_.config().mrope_section.empty()) return;
  for (int64_t p = lo; p < hi; ++p) {
    for (int a = 0; a < 3; ++a) {
      const bool prompt = !r.mrope.empty() && p < r.seq.n_prompt;
      rows3->push_back(prompt ? r.mrope[a * r.seq.n_prompt + p]
                              : static_cast<int32_t>(p + r.rope_delta));
    }
  }
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.num_running = scheduler_.n_running();
  s.num_waiting = scheduler_.n_waiting();
  s.kv_blocks_total = scheduler_.pool().n_blocks();
  s.kv_blocks_used = scheduler_.pool().n_used();
  s.kv_cache_tokens = s.kv_blocks_total * config_.block_size;
  s.prefix_cache_queries = scheduler_.prefix_queries();
  s.prefix_cache_hits = scheduler_.prefix_hits();
  s.preemptions = scheduler_.n_preemptions();
  return s;
}

}  // namespace qs::engine
