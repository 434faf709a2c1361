// models: a loaded decoder-only model and its one forward pass, batched and paged as vLLM's:
// the tokens of several sequences go through every matmul together, each sequence attends to
// its own blocks of the paged KV cache, and prefill chunks mix freely with decode steps.
// A single prompt is a batch of one; there is no other path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "formats/quant_scheme.h"
#include "io/quant_config.h"
#include "models/blocks.h"
#include "models/kv_scales.h"
#include "models/model_config.h"
#include "models/tensor_parallel.h"
#include "ops/attention.h"
#include "ops/backend.h"
#include "ops/linear.h"

namespace qs::models {

// The input of one forward call.
struct ForwardBatch {
  // [n_tokens]: the new tokens of every sequence, back to back in the order of `seqs`.
  std::vector<int32_t> token_ids;
  // Per sequence: its rows of token_ids (query_start, n_query), how many of its tokens are
  // already in the cache (start_pos; the new ones sit at start_pos, start_pos + 1, ...), and
  // its block table, which must already cover start_pos + n_query tokens.
  std::vector<ops::AttentionSeq> seqs;
  // false: logits of the last new token of each sequence, [n_seqs, vocab];
  // true: logits of every token, [n_tokens, vocab] (goldens, perplexity).
  bool all_logits = false;
  // When set, each MoE layer appends the experts it chose: [n_moe_layers][n_tokens][top_k],
  // largest weight first (tests against transformers' router; routing statistics).
  std::vector<int32_t>* routes = nullptr;
  // When set, MoE layers add their counts: the (token, expert) pairs routed, and the expert
  // weight reads they cost (each chosen expert of a layer is read once per call, however many
  // of the batch's tokens chose it).
  struct MoeCounts {
    int64_t routed_slots = 0;
    int64_t expert_reads = 0;
  };
  MoeCounts* moe_counts = nullptr;
  // Multimodal input: rows of the batch that take an embedding (an image's merged patches,
  // computed once by its encoder) instead of their token's row of embed_tokens. Not owned;
  // [count, hidden_size] each.
  struct EmbeddingSpan {
    int64_t row = 0;
    int64_t count = 0;
    const float* data = nullptr;
  };
  std::vector<EmbeddingSpan> embeddings;
  // Models with multimodal RoPE (ModelConfig::mrope_section): every row's 3-D position
  // (temporal, height, width), axis-major [3 * n_tokens], as get_rope_index gives them for a
  // prompt and start_pos + the request's rope delta on each axis after it. Empty: each axis at
  // the row's 1-D position (a text-only request).
  std::vector<int32_t> mrope_positions;
};

struct LoadOptions {
  // vLLM's --quantization: empty = detect; otherwise it must agree with the checkpoint's
  // quantization_config (io::check_requested_quantization).
  std::string quantization;
  // --lm-head-dtype: "auto" keeps lm_head as stored; "int8" makes a 16-bit head (tied or not,
  // this rank's vocab shard under tensor parallelism) int8 per row at load
  // (models/lm_head_int8.h). Other values are load errors.
  std::string lm_head_dtype = "auto";
  // vLLM's --tensor-parallel-size: the ranks of this communicator split every layer
  // (models/tensor_parallel.h); each loads only its shard, and every rank must run the same
  // forward calls (rank 0 tells the others which: engine/tensor_parallel_worker.h). Null or
  // size 1: the whole model in this process.
  std::shared_ptr<dist::Communicator> tensor_parallel;
  // vLLM's --device, resolved (ops::resolve_device): the backend the weights are adopted by,
  // and the forward, its activations and (through the engine) the KV cache run on.
  Device device = kCpuDevice;
};

// One matmul of a loaded model, for reports (inspect, bench).
struct LinearInfo {
  std::string name;  // "model.layers.0.self_attn.q_proj", "lm_head"
  const ops::LinearWeight* weight = nullptr;
  formats::QuantScheme scheme;  // as the checkpoint stores it (kDense: 16-bit)
  size_t stored_bytes = 0;      // its tensors' bytes in the checkpoint (bias excluded)
  bool routed_expert = false;   // an MoE expert, read only by the tokens routed to it
};

class Model {
 public:
  // Reads config.json and the safetensors of `dir`, checks every tensor against
  // expected_tensors() (each missing or misshapen one is named with its file, expected and
  // found shape; unexpected extra tensors are logged as warnings), and keeps matmul weights
  // as zero-copy views of the mapping. Norm weights and biases are converted to f32.
  // Quantized checkpoints (io/quant_config.h) are detected from their metadata: every linear
  // is built from its stored layout (formats/layouts.h) into a resident ops::LinearWeight,
  // after its tensors are checked against the layout; a mismatch names the layer and why.
  static Result<std::unique_ptr<Model>> load(const std::string& dir,
                                             const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  // The config this rank's layers run with: its share of the heads and intermediate columns
  // under tensor parallelism (the KV cache is sized from it), config() otherwise.
  const ModelConfig& local_config() const { return local_config_; }
  // The tensor-parallel group, or null when the model is whole in this process.
  dist::Communicator* tensor_parallel() const { return plan_.split() ? tp_.get() : nullptr; }
  const TensorParallelPlan& tensor_parallel_plan() const { return plan_; }
  const io::QuantConfig& quant_config() const { return quant_; }
  // Every matmul in forward order (q, k, v, o, then gate, up, down of the MLP, or of each
  // expert and the shared expert, per layer; then lm_head).
  std::vector<LinearInfo> linears() const;
  // Weight bytes one decode step of one sequence streams: the linears' resident bytes, lm_head
  // included (also when tied to the embedding), norms and routers, with the routed experts
  // counted at top_k / n_experts of their bytes (the active parameters of an MoE model); not
  // the embedding table.
  size_t decode_weight_bytes() const;
  // All resident weight bytes: every linear and expert, norms, and the embedding table when
  // untied.
  size_t resident_weight_bytes() const;

  // Runs the batch, writing its K/V into `kv` (one entry per layer) and the requested logits
  // into `logits` (resized). Invalid token ids, positions past max_position_embeddings and
  // block tables that do not fit the cache are errors. Under tensor parallelism every rank
  // makes the same call (its own shard of the cache) and gets the whole logits; a rank that
  // fails or stops answering makes it fail with kUnavailable.
  Status forward(const ForwardBatch& batch, std::span<const ops::PagedKvLayer> kv, ThreadPool& pool,
                 std::vector<float>* logits) const;

  // For the offline quantizer (quant/), which runs the decoder blocks one at a time on
  // calibration activations: the embedding rows of `ids` as f32 into out [ids.size(), hidden]
  // (ids outside the vocabulary are errors), and read-only access to one layer's weights.
  Status embed(std::span<const int32_t> ids, float* out) const;
  const DecoderLayerWeights& layer(int64_t index) const { return layers_.at(index); }
  // The final norm's weight [hidden] and lm_head (the embedding itself when tied): the inputs
  // and the weight of the quantizer's layer outside the blocks.
  std::span<const float> final_norm() const { return final_norm_; }
  const ops::LinearWeight& lm_head() const { return lm_head_; }

  // Per-layer k/v scales for an fp8 KV cache, from the checkpoint where it has them, else 1.0
  // (models/kv_scales.h).
  const KvCacheScales& kv_cache_scales() const { return kv_scales_; }

  // The backend the model was loaded onto (LoadOptions::device); the KV cache given to
  // forward must be this backend's memory.
  ops::Backend& backend() const { return *backend_; }

 private:
  // Hands every linear (`linears`: those of the load order), the embedding table and the f32
  // parameters to the backend, once, at the end of load.
  Status adopt_weights(const std::vector<std::pair<std::string, ops::LinearWeight*>>& linears);
  // The f32 norms, routers and shared-expert gates, which every step reads whole.
  size_t f32_weight_bytes() const;

  ModelConfig config_;
  ModelConfig local_config_;
  TensorParallelPlan plan_;
  std::shared_ptr<dist::Communicator> tp_;
  io::QuantConfig quant_;
  std::vector<LinearInfo> linear_infos_;  // filled at load; `weight` points into layers_
  std::vector<float> inv_freq_;           // [head_dim / 2]
  Tensor embed_;  // [vocab, hidden]; this rank's rows under tensor parallelism
  std::vector<DecoderLayerWeights> layers_;
  std::vector<float> final_norm_;  // [hidden]
  ops::LinearWeight lm_head_;      // [vocab, hidden]; the embedding itself when tied
  KvCacheScales kv_scales_;
  std::shared_ptr<ops::Backend> backend_;
};

}  // namespace qs::models
