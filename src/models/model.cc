// models: loading a checkpoint against its declarative tensor list, and the batched forward.
#include "models/model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/json.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "models/linear_loader.h"
#include "models/lm_head_int8.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

namespace qs::models {
namespace {

std::string module_of(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string_view(".weight").size());
}

Status report(const std::string& dir, const ModelConfig& config,
              const std::vector<std::string>& problems) {
  if (problems.empty()) return ok_status();
  std::string msg = dir + ": checkpoint does not match " + config.architecture + ":";
  const size_t shown = std::min<size_t>(problems.size(), 8);
  for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
  if (problems.size() > shown) {
    msg += "\n  ... and " + std::to_string(problems.size() - shown) + " more";
  }
  return invalid_argument(msg);
}

// Checks every expected non-linear tensor at once so that a broken checkpoint is reported
// in one go (the linears' problems are collected by LinearLoader and reported with these).
std::vector<std::string> validate_tensors(const io::Checkpoint& ckpt, const ModelConfig& config) {
  std::vector<std::string> problems;
  // Linear weights may be stored quantized under other names; LinearLoader checks them
  // against their layout instead.
  for (const TensorSpec& spec : expected_tensors(config)) {
    if (spec.linear) continue;
    if (ckpt.has(module_of(spec.name) + ".qweight")) {
      problems.push_back("tensor '" + spec.name + "' is stored quantized, which is supported " +
                         "for linear layers only");
      continue;
    }
    if (!ckpt.has(spec.name)) {
      problems.push_back("tensor '" + spec.name + "' is missing (expected shape " +
                         shape_string(spec.shape) + ")");
      continue;
    }
    auto t = ckpt.get(spec.name);
    if (!t.ok()) {
      problems.push_back(t.status().message());
    } else if (t->shape != spec.shape) {
      problems.push_back(ckpt.file_of(spec.name) + ": tensor '" + spec.name + "' has shape " +
                         shape_string(t->shape) + ", expected " + shape_string(spec.shape));
    } else if (!dtype_is_float(t->dtype)) {
      problems.push_back(ckpt.file_of(spec.name) + ": tensor '" + spec.name + "' has dtype " +
                         dtype_name(t->dtype) + ", expected a float type");
    }
  }
  return problems;
}

// Tensors nothing consumed: logged, as transformers does, not fatal.
void warn_unexpected(const io::Checkpoint& ckpt, const ModelConfig& config,
                     const std::set<std::string>& consumed) {
  std::set<std::string> expected_names;
  for (const TensorSpec& spec : expected_tensors(config)) {
    if (!spec.linear) expected_names.insert(spec.name);
  }
  for (const std::string& name : ckpt.names()) {
    // Tied checkpoints may still carry lm_head.weight, which transformers ignores too.
    const bool known =
        expected_names.count(name) > 0 || consumed.count(name) > 0 || name.ends_with("_proj.bias");
    // A vision-language checkpoint's tower (visual.*) is the tower's to read.
    const bool tower = std::any_of(config.tower_prefixes.begin(), config.tower_prefixes.end(),
                                   [&](const std::string& p) { return name.starts_with(p); });
    if (!known && !tower && !(config.tie_word_embeddings && name.starts_with("lm_head."))) {
      QS_LOG_WARN("%s: ignoring unexpected tensor '%s'", ckpt.dir().c_str(), name.c_str());
    }
  }
}

// Validated above: present, right shape, float dtype.
Tensor get(const io::Checkpoint& ckpt, const std::string& name) {
  return ckpt.get(name).value();
}

std::vector<float> get_f32(const io::Checkpoint& ckpt, const std::string& name) {
  return ckpt.get(name).value().to_f32();
}

std::vector<float> get_f32_if(bool present, const io::Checkpoint& ckpt, const std::string& name) {
  return present ? get_f32(ckpt, name) : std::vector<float>();
}

// A bias's entries for a tensor-parallel shard of its linear: the rows of a column-parallel
// one; a row-parallel one's bias is added once, by the rank that owns it, or not at all.
std::vector<float> bias_shard(std::vector<float> b, const LinearShard& shard, bool owner) {
  if (b.empty() || !shard.split()) return b;
  if (shard.axis == LinearShard::Axis::kCols) return owner ? b : std::vector<float>();
  return std::vector<float>(b.begin() + shard.begin, b.begin() + shard.begin + shard.count);
}

// A host array as the backend reads it: itself where the backend addresses host memory, else
// its copy in `staged`.
Result<const float*> stage(ops::Backend& b, const std::vector<float>& host,
                           ops::DeviceArray<float>* staged) {
  if (b.host_addressable()) return host.data();
  QS_RETURN_IF_ERROR(staged->resize(b, static_cast<int64_t>(host.size())));
  QS_RETURN_IF_ERROR(b.copy_from_host(staged->data(), host.data(), host.size() * sizeof(float)));
  return static_cast<const float*>(staged->data());
}

// Rows [row0, row0 + rows) of matrix `index` of a [count, R, cols] tensor, as a [rows, cols]
// view of the same mapping.
Tensor slice_rows(const Tensor& t, int64_t index, int64_t row0, int64_t rows) {
  Tensor v;
  v.dtype = t.dtype;
  v.shape = {rows, t.dim(2)};
  const int64_t first = (index * t.dim(1) + row0) * t.dim(2);
  v.data = static_cast<const uint8_t*>(t.data) + first * static_cast<int64_t>(dtype_size(t.dtype));
  v.owner = t.owner;
  return v;
}

// Expert e of layer i from the fused tensors (MoeConfig::fused_experts), already validated
// for shape and float dtype: its gate, up and down as views of the mapping, made into linears
// as any 16-bit weight is.
void fused_expert(const io::Checkpoint& ckpt, const ModelConfig& c, const TensorParallelPlan& tp,
                  int64_t i, int64_t e, MlpWeights* w, std::vector<LinearInfo>* infos,
                  std::vector<std::pair<std::string, ops::LinearWeight*>>* order,
                  std::vector<std::string>* problems) {
  const std::string p = "model.layers." + std::to_string(i) + ".mlp.experts.";
  auto gate_up = ckpt.get(p + "gate_up_proj");
  auto down = ckpt.get(p + "down_proj");
  if (!gate_up.ok() || !down.ok()) return;  // reported by validate_tensors
  const int64_t inter = c.moe.expert_intermediate;
  // This rank's columns of the expert (all of them without tensor parallelism).
  const int64_t begin = tp.split() ? tp.expert_inter_begin : 0;
  const int64_t count = tp.split() ? tp.expert_inter : inter;
  const MlpNames names = mlp_names(c, i, e);
  Tensor down_e = slice_rows(*down, e, 0, c.hidden_size);
  if (tp.split()) down_e = dense_shard(down_e, {LinearShard::Axis::kCols, begin, count});
  const std::pair<const std::string*, Tensor> parts[] = {
      {&names.gate, slice_rows(*gate_up, e, begin, count)},
      {&names.up, slice_rows(*gate_up, e, inter + begin, count)},
      {&names.down, down_e}};
  ops::LinearWeight* outs[] = {&w->gate, &w->up, &w->down};
  for (int j = 0; j < 3; ++j) {
    auto weight = ops::with_panels(parts[j].second);
    if (!weight.ok()) {
      problems->push_back(*parts[j].first + ": " + weight.status().message());
      continue;
    }
    *outs[j] = std::move(weight).value();
    LinearInfo info;
    info.name = *parts[j].first;
    info.routed_expert = true;
    info.stored_bytes = parts[j].second.nbytes();
    infos->push_back(info);
    order->emplace_back(info.name, outs[j]);
  }
}

// The checkpoint's tensors as the model names them. For a model kept inside a larger
// checkpoint (ModelConfig::tensor_prefix) that is the view rooted at its prefix; the parts
// stored beside it are counted into config->skipped_parts and reported as not run, and
// tensors outside every part are warned about as any unexpected tensor is.
Result<io::Checkpoint> open_model_tensors(const std::string& dir, ModelConfig* config) {
  QS_ASSIGN_OR_RETURN(io::Checkpoint stored, io::Checkpoint::open(dir));
  if (config->tensor_prefix.empty()) return stored;
  std::string parts;
  for (const std::string& name : stored.names()) {
    if (name.starts_with(config->tensor_prefix)) continue;
    auto part = std::find_if(config->skipped_parts.begin(), config->skipped_parts.end(),
                             [&](const SkippedPart& p) { return name.starts_with(p.prefix); });
    if (part == config->skipped_parts.end()) {
      QS_LOG_WARN("%s: ignoring unexpected tensor '%s' (outside %s*)", dir.c_str(), name.c_str(),
                  config->tensor_prefix.c_str());
      continue;
    }
    ++part->n_tensors;
    part->n_bytes += stored.get(name).value().nbytes();
  }
  for (const SkippedPart& p : config->skipped_parts) {
    parts += (parts.empty() ? "" : ", ") + p.name + " (" + p.prefix +
             "*: " + std::to_string(p.n_tensors) + " tensors, " + std::to_string(p.n_bytes) +
             " bytes)";
  }
  QS_LOG_INFO(
      "%s: %s checkpoint: running its %s (%s*); not run: %s (speech output is not "
      "supported)",
      dir.c_str(), config->container_architecture.c_str(), config->architecture.c_str(),
      config->tensor_prefix.c_str(), parts.empty() ? "nothing" : parts.c_str());
  return stored.rooted(config->tensor_prefix);
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const LoadOptions& options) {
  QS_RETURN_IF_ERROR(check_lm_head_dtype(options.lm_head_dtype));
  const bool int8_head = options.lm_head_dtype == "int8";
  QS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
  QS_ASSIGN_OR_RETURN(nlohmann::json raw_config, read_json(dir + "/config.json"));
  QS_ASSIGN_OR_RETURN(io::QuantConfig quant, io::load_quant_config(dir, raw_config));
  // The quantization config names modules as stored; the model asks by its own names.
  if (!config.tensor_prefix.empty()) quant = quant.rooted(config.tensor_prefix);
  if (!options.quantization.empty()) {
    QS_RETURN_IF_ERROR(io::check_requested_quantization(quant, options.quantization));
  }
  if (quant.quantized()) QS_LOG_INFO("%s: %s", dir.c_str(), quant.summary().c_str());
  for (const std::string& note : quant.notes()) QS_LOG_INFO("%s: %s", dir.c_str(), note.c_str());
  QS_ASSIGN_OR_RETURN(io::Checkpoint ckpt, open_model_tensors(dir, &config));
  for (int64_t i = 0; i < config.n_layers; ++i) {
    if (!is_moe_layer(config, i)) continue;
    config.moe.fused_experts =
        config.moe.naming == ExpertNaming::kQwen &&
        ckpt.has("model.layers." + std::to_string(i) + ".mlp.experts.gate_up_proj");
    break;
  }
  std::vector<std::string> problems = validate_tensors(ckpt, config);

  auto m = std::unique_ptr<Model>(new Model());
  m->config_ = config;
  QS_ASSIGN_OR_RETURN(m->backend_, ops::backend_for(options.device));
  if (!m->backend_->host_addressable() && options.tensor_parallel != nullptr &&
      options.tensor_parallel->size() > 1) {
    return unimplemented("tensor parallelism on " + device_name(options.device) +
                         ": the collectives run on host memory (MPI); use --device cpu");
  }
  if (options.tensor_parallel != nullptr && options.tensor_parallel->size() > 1) {
    QS_ASSIGN_OR_RETURN(m->plan_, TensorParallelPlan::make(config, options.tensor_parallel->rank(),
                                                           options.tensor_parallel->size()));
    m->tp_ = options.tensor_parallel;
  }
  m->local_config_ = m->plan_.local(config);
  const TensorParallelPlan& tp = m->plan_;
  m->quant_ = quant;
  m->inv_freq_ = rope_inv_freq(config);
  LinearLoader linears(ckpt, m->quant_, *m->backend_);
  // Linear weights are loaded even when other tensors are already known to be broken, so
  // that one error lists every problem.
  std::vector<std::pair<std::string, ops::LinearWeight*>> order;
  // The linears are queued in forward order and loaded together below, over the cores.
  std::vector<LinearLoader::Request> requests;
  std::vector<size_t> request_info;  // per request: its index in linear_infos_
  auto linear = [&](const std::string& module, int64_t n, int64_t k, ops::LinearWeight* w,
                    bool routed, const LinearShard& shard) {
    LinearInfo info;
    info.name = module;
    info.routed_expert = routed;
    request_info.push_back(m->linear_infos_.size());
    requests.push_back({module, n, k, w, nullptr, nullptr, shard});
    m->linear_infos_.push_back(info);
    order.emplace_back(module, w);
  };
  // Per MoE layer: its experts' range of linear_infos_, checked for one shared scheme once
  // loaded.
  std::vector<std::pair<size_t, size_t>> expert_ranges;
  m->layers_.resize(config.n_layers);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    DecoderLayerWeights& l = m->layers_[i];
    if (is_moe_layer(config, i)) l.moe.experts.resize(config.moe.n_experts);
    // The routed experts are contiguous in the list: [experts_begin, experts_end).
    std::optional<size_t> experts_begin;
    size_t experts_end = 0;
    for (const LayerLinear& ll : layer_linears(config, i)) {
      if (ll.expert >= 0 && !experts_begin) experts_begin = m->linear_infos_.size();
      if (ll.expert >= 0 && config.moe.fused_experts) {
        if (ll.role == LinearRole::kGate) {
          fused_expert(ckpt, config, tp, i, ll.expert, &l.moe.experts[ll.expert], &m->linear_infos_,
                       &order, &problems);
        }
      } else {
        linear(ll.name, ll.out, ll.in, linear_slot(l, ll).weight, ll.expert >= 0, tp.shard_of(ll));
      }
      if (ll.expert >= 0) experts_end = m->linear_infos_.size();
    }
    if (experts_begin) expert_ranges.emplace_back(*experts_begin, experts_end);
  }
  if (!config.tie_word_embeddings)
    linear("lm_head", config.vocab_size, config.hidden_size, &m->lm_head_, false, tp.vocab_shard());
  for (size_t r = 0; r < requests.size(); ++r) {
    LinearInfo& info = m->linear_infos_[request_info[r]];
    requests[r].scheme = &info.scheme;
    requests[r].stored_bytes = &info.stored_bytes;
  }
  {
    ThreadPool load_pool(ThreadPool::default_threads());
    linears.load_all(requests, load_pool);
  }
  // Experts of one layer share one quantization: the checkpoint formats lay them out as one
  // stack (auto-round, GPTQ, vLLM's fused MoE), and a routed matmul runs them alike.
  for (const auto& [first, last] : expert_ranges) {
    for (size_t j = first + 3; j < last; ++j) {
      const LinearInfo& a = m->linear_infos_[first + (j - first) % 3];
      const LinearInfo& b = m->linear_infos_[j];
      if (!(a.scheme == b.scheme)) {
        problems.push_back("expert '" + b.name + "' is stored as " + b.scheme.describe() +
                           " but its sibling '" + a.name + "' as " + a.scheme.describe() +
                           "; the experts of one layer must share one quantization");
      }
    }
  }
  problems.insert(problems.end(), linears.problems().begin(), linears.problems().end());
  std::set<std::string> consumed = linears.consumed();
  auto kv_scales = read_kv_cache_scales(ckpt, config.n_layers, config.n_kv_heads, &consumed);
  if (!kv_scales.ok()) problems.push_back(kv_scales.status().message());
  QS_RETURN_IF_ERROR(report(dir, config, problems));
  m->kv_scales_ = std::move(kv_scales).value();
  warn_unexpected(ckpt, config, consumed);
  if (int8_head && !config.tie_word_embeddings) {
    QS_RETURN_IF_ERROR(make_int8_lm_head(dir, &m->lm_head_));
  }

  m->embed_ = get(ckpt, "model.embed_tokens.weight");
  if (tp.split()) m->embed_ = dense_shard(m->embed_, tp.vocab_shard());
  const bool bias_owner = tp.owns_row_parallel_bias();
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    DecoderLayerWeights& l = m->layers_[i];
    l.attn_norm = get_f32(ckpt, p + "input_layernorm.weight");
    l.mlp_norm = get_f32(ckpt, p + "post_attention_layernorm.weight");
    AttentionWeights& a = l.attn;
    // The shards of the layer's linears, by role, for their biases.
    std::map<LinearRole, LinearShard> shards;
    for (const LayerLinear& ll : layer_linears(config, i)) {
      if (ll.expert < 0 && !ll.shared) shards[ll.role] = tp.shard_of(ll);
    }
    a.bq = bias_shard(get_f32_if(config.qkv_bias, ckpt, p + "self_attn.q_proj.bias"),
                      shards[LinearRole::kQ], bias_owner);
    a.bk = bias_shard(get_f32_if(config.qkv_bias, ckpt, p + "self_attn.k_proj.bias"),
                      shards[LinearRole::kK], bias_owner);
    a.bv = bias_shard(get_f32_if(config.qkv_bias, ckpt, p + "self_attn.v_proj.bias"),
                      shards[LinearRole::kV], bias_owner);
    a.bo = bias_shard(get_f32_if(config.o_bias, ckpt, p + "self_attn.o_proj.bias"),
                      shards[LinearRole::kO], bias_owner);
    a.q_norm = get_f32_if(config.qk_norm, ckpt, p + "self_attn.q_norm.weight");
    a.k_norm = get_f32_if(config.qk_norm, ckpt, p + "self_attn.k_norm.weight");
    a.sliding_window = config.sliding_window[i];
    if (is_moe_layer(config, i)) {
      l.moe.router = get_f32(ckpt, router_name(config, i) + ".weight");
      if (config.moe.shared_intermediate > 0) {
        l.moe.shared_gate = get_f32(ckpt, shared_gate_name(config, i) + ".weight");
      }
      continue;
    }
    const MlpNames names = mlp_names(config, i, 0);
    MlpWeights& f = l.mlp;
    f.b_gate = bias_shard(get_f32_if(config.mlp_bias, ckpt, names.gate + ".bias"),
                          shards[LinearRole::kGate], bias_owner);
    f.b_up = bias_shard(get_f32_if(config.mlp_bias, ckpt, names.up + ".bias"),
                        shards[LinearRole::kUp], bias_owner);
    f.b_down = bias_shard(get_f32_if(config.mlp_bias, ckpt, names.down + ".bias"),
                          shards[LinearRole::kDown], bias_owner);
  }
  m->final_norm_ = get_f32(ckpt, "model.norm.weight");
  if (config.tie_word_embeddings) {
    // The tied lm_head gets pair panels like every 16-bit linear (the loader's), or is made
    // int8 without them; the embedding lookups read the mapping's rows, which fault back in
    // one by one.
    if (int8_head) {
      m->lm_head_ = ops::LinearWeight(m->embed_);
      QS_RETURN_IF_ERROR(make_int8_lm_head(dir, &m->lm_head_));
    } else {
      QS_ASSIGN_OR_RETURN(m->lm_head_, ops::with_panels(m->embed_));
    }
    LinearInfo info;
    info.name = "lm_head";
    info.stored_bytes = m->embed_.nbytes();
    m->linear_infos_.push_back(info);
    order.emplace_back("lm_head", &m->lm_head_);
  }
  for (size_t i = 0; i < order.size(); ++i) m->linear_infos_[i].weight = order[i].second;
  QS_RETURN_IF_ERROR(m->adopt_weights(order));
  return m;
}

Status Model::adopt_weights(
    const std::vector<std::pair<std::string, ops::LinearWeight*>>& linears) {
  ops::Backend& b = *backend_;
  for (const auto& [name, w] : linears) {
    auto adopted = b.adopt_linear(*w);
    if (!adopted.ok()) return adopted.status().with_context(name);
    *w = std::move(adopted).value();
  }
  // The embedding table is read by the backend's row gather.
  QS_ASSIGN_OR_RETURN(embed_, b.adopt_tensor(embed_));
  QS_RETURN_IF_ERROR(b.adopt_params(final_norm_));
  for (const DecoderLayerWeights& l : layers_) {
    const AttentionWeights& a = l.attn;
    for (const std::vector<float>* v :
         {&l.attn_norm, &l.mlp_norm, &a.bq, &a.bk, &a.bv, &a.bo, &a.q_norm, &a.k_norm,
          &l.mlp.b_gate, &l.mlp.b_up, &l.mlp.b_down}) {
      if (!v->empty()) QS_RETURN_IF_ERROR(b.adopt_params(*v));
    }
  }
  return ok_status();
}

std::vector<LinearInfo> Model::linears() const {
  return linear_infos_;
}

size_t Model::f32_weight_bytes() const {
  size_t n = final_norm_.size();
  for (const DecoderLayerWeights& l : layers_) {
    n += l.attn_norm.size() + l.mlp_norm.size() + l.attn.q_norm.size() + l.attn.k_norm.size() +
         l.moe.router.size() + l.moe.shared_gate.size();
  }
  return n * sizeof(float);
}

size_t Model::decode_weight_bytes() const {
  // A routed expert is read by top_k of every n_experts tokens' worth of choices: one token
  // streams top_k experts of each MoE layer, which on average is this share of their bytes.
  const double routed_share =
      config_.moe.n_experts > 0
          ? static_cast<double>(config_.moe.top_k) / static_cast<double>(config_.moe.n_experts)
          : 1.0;
  double routed = 0;
  size_t bytes = 0;
  for (const LinearInfo& l : linear_infos_) {
    if (l.routed_expert) {
      routed += static_cast<double>(l.weight->resident_bytes());
    } else {
      bytes += l.weight->resident_bytes();
    }
  }
  return bytes + static_cast<size_t>(routed * routed_share) + f32_weight_bytes();
}

size_t Model::resident_weight_bytes() const {
  size_t bytes = 0;
  for (const LinearInfo& l : linear_infos_) bytes += l.weight->resident_bytes();
  bytes += f32_weight_bytes();
  return bytes + (config_.tie_word_embeddings ? 0 : embed_.nbytes());
}

Status Model::forward(const ForwardBatch& batch, std::span<const ops::PagedKvLayer> kv,
                      ThreadPool& pool, std::vector<float>* logits) const {
  const ModelConfig& c = config_;
  const int64_t n_tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hidden = c.hidden_size;
  if (n_tokens == 0 || batch.seqs.empty()) return invalid_argument("forward: empty batch");
  if (static_cast<int64_t>(kv.size()) != c.n_layers) {
    return invalid_argument("forward: KV cache has " + std::to_string(kv.size()) +
                            " layers, the model " + std::to_string(c.n_layers));
  }
  const ModelConfig& lc = local_config_;
  for (const auto& layer : kv) {
    if (layer.n_kv_heads != lc.n_kv_heads || layer.head_dim != lc.head_dim) {
      return invalid_argument("forward: KV cache layout [" + std::to_string(layer.n_kv_heads) +
                              " heads x " + std::to_string(layer.head_dim) +
                              "] does not match the model's [" + std::to_string(lc.n_kv_heads) +
                              " x " + std::to_string(lc.head_dim) + "]");
    }
  }
  QS_RETURN_IF_ERROR(ops::validate_paged_batch(kv[0], batch.seqs, n_tokens));

  std::vector<int32_t> positions(n_tokens);
  for (const auto& s : batch.seqs) {
    if (s.start_pos + s.n_query > c.max_position_embeddings) {
      return out_of_range("forward: a sequence of " + std::to_string(s.start_pos + s.n_query) +
                          " tokens exceeds max_position_embeddings " +
                          std::to_string(c.max_position_embeddings));
    }
    for (int64_t j = 0; j < s.n_query; ++j) {
      positions[s.query_start + j] = static_cast<int32_t>(s.start_pos + j);
    }
  }

  for (const int32_t id : batch.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid_argument("forward: token id " + std::to_string(id) +
                              " outside the vocabulary of " + std::to_string(c.vocab_size));
    }
  }
  for (const ForwardBatch::EmbeddingSpan& e : batch.embeddings) {
    if (e.data == nullptr || e.row < 0 || e.count < 0 || e.row + e.count > n_tokens) {
      return invalid_argument("forward: an embedding span outside the batch's " +
                              std::to_string(n_tokens) + " rows");
    }
  }
  // Checked above, before the first collective, so that every rank of a tensor-parallel group
  // refuses a bad batch alike instead of leaving the others waiting.
  dist::Communicator* tp = tensor_parallel();

  // x: [n_tokens, hidden], the residual stream, and every activation on the model's backend.
  ops::Backend& b = *backend_;
  BlockScratch scratch;
  scratch.backend = &b;
  ops::DeviceArray<float> x, h;
  QS_RETURN_IF_ERROR(x.resize(b, n_tokens * hidden));
  QS_RETURN_IF_ERROR(h.resize(b, n_tokens * hidden));
  // Vocabulary-parallel: each rank fills the rows of its own tokens, the sum completes x.
  QS_RETURN_IF_ERROR(b.embed_rows(embed_, batch.token_ids, plan_.vocab_begin, x.data()));
  if (tp != nullptr) QS_RETURN_IF_ERROR(tp->all_reduce_sum(x.data(), n_tokens * hidden));
  for (const ForwardBatch::EmbeddingSpan& e : batch.embeddings) {
    QS_RETURN_IF_ERROR(
        b.copy_from_host(x.data() + e.row * hidden, e.data, e.count * hidden * sizeof(float)));
  }
  std::vector<float> cos, sin;  // [n_tokens, head_dim / 2]
  if (c.mrope_section.empty()) {
    if (!batch.mrope_positions.empty()) {
      return invalid_argument("forward: 3-D positions given to a model with 1-D RoPE");
    }
    rope_tables(inv_freq_, positions, &cos, &sin);
  } else if (batch.mrope_positions.empty()) {
    std::vector<int32_t> p3(3 * positions.size());
    for (int a = 0; a < 3; ++a)
      std::copy(positions.begin(), positions.end(), p3.begin() + a * n_tokens);
    rope_tables_mrope(inv_freq_, c.mrope_section, p3, n_tokens, &cos, &sin);
  } else {
    if (static_cast<int64_t>(batch.mrope_positions.size()) != 3 * n_tokens) {
      return invalid_argument("forward: 3-D positions for " +
                              std::to_string(batch.mrope_positions.size() / 3) +
                              " rows, the batch has " + std::to_string(n_tokens));
    }
    for (int32_t p : batch.mrope_positions) {
      if (p < 0 || p >= c.max_position_embeddings) {
        return out_of_range("forward: a 3-D position " + std::to_string(p) +
                            " outside max_position_embeddings");
      }
    }
    rope_tables_mrope(inv_freq_, c.mrope_section, batch.mrope_positions, n_tokens, &cos, &sin);
  }
  // The tables are made on the host and read by the backend's RoPE.
  ops::DeviceArray<float> cos_staged, sin_staged;
  QS_ASSIGN_OR_RETURN(const float* cos_b, stage(b, cos, &cos_staged));
  QS_ASSIGN_OR_RETURN(const float* sin_b, stage(b, sin, &sin_staged));

  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    QS_RETURN_IF_ERROR(decoder_layer(lc, layers_[i], x.data(), n_tokens, cos_b, sin_b, kv[i],
                                     batch.seqs, scratch, pool, tp));
    if (layers_[i].sparse()) {
      if (batch.routes != nullptr) {
        batch.routes->insert(batch.routes->end(), scratch.routes.begin(), scratch.routes.end());
      }
      if (batch.moe_counts != nullptr) {
        batch.moe_counts->routed_slots += static_cast<int64_t>(scratch.routes.size());
        batch.moe_counts->expert_reads += scratch.experts_read;
      }
    }
  }

  // Only the rows whose logits are wanted go through the final norm and lm_head.
  const float* final_norm = b.params(final_norm_);
  int64_t n_rows = n_tokens;
  if (!batch.all_logits) {
    n_rows = static_cast<int64_t>(batch.seqs.size());
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto& s = batch.seqs[r];
      QS_RETURN_IF_ERROR(b.copy(h.data() + r * hidden,
                                x.data() + (s.query_start + s.n_query - 1) * hidden,
                                hidden * sizeof(float)));
    }
    b.rms_norm(h.data(), n_rows, hidden, final_norm, eps, h.data());
  } else {
    b.rms_norm(x.data(), n_rows, hidden, final_norm, eps, h.data());
  }
  logits->resize(n_rows * c.vocab_size);
  if (tp == nullptr) {
    if (b.host_addressable()) {
      return b.linear(h.data(), n_rows, lm_head_, nullptr, logits->data(), pool);
    }
    ops::DeviceArray<float> out;
    QS_RETURN_IF_ERROR(out.resize(b, n_rows * c.vocab_size));
    QS_RETURN_IF_ERROR(b.linear(h.data(), n_rows, lm_head_, nullptr, out.data(), pool));
    QS_RETURN_IF_ERROR(b.copy_to_host(logits->data(), out.data(), logits->size() * sizeof(float)));
    return b.synchronize();
  }
  // Each rank's vocabulary slice, padded to one size for the all-gather, then put in order.
  const int64_t pad = plan_.vocab_padded, size = tp->size();
  std::vector<float> mine(n_rows * pad, 0.0f), all(size * n_rows * pad);
  std::vector<float> part(n_rows * plan_.vocab_count);
  QS_RETURN_IF_ERROR(b.linear(h.data(), n_rows, lm_head_, nullptr, part.data(), pool));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::copy_n(part.data() + r * plan_.vocab_count, plan_.vocab_count, mine.data() + r * pad);
  }
  QS_RETURN_IF_ERROR(tp->all_gather(mine.data(), mine.size() * sizeof(float), all.data()));
  for (int64_t k = 0; k < size; ++k) {
    const int64_t v0 = k * pad, count = std::min(pad, c.vocab_size - v0);
    for (int64_t r = 0; r < n_rows && count > 0; ++r) {
      std::copy_n(all.data() + (k * n_rows + r) * pad, count,
                  logits->data() + r * c.vocab_size + v0);
    }
  }
  return ok_status();
}

Status Model::embed(std::span<const int32_t> ids, float* out) const {
  if (plan_.split()) return unimplemented("embed: the model is split over tensor-parallel ranks");
  if (!embed_.is_cpu()) {
    return unimplemented("embed: the embedding table is on " + device_name(embed_.device) +
                         "; the quantizer loads models on the CPU");
  }
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= config_.vocab_size) {
      return invalid_argument("embed: token id " + std::to_string(ids[t]) +
                              " outside the vocabulary of " + std::to_string(config_.vocab_size));
    }
  }
  return ops::cpu_backend().embed_rows(embed_, ids, 0, out);
}

}  // namespace qs::models
