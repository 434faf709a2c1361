// models: how a decoder is split over tensor-parallel ranks, Megatron-style as vLLM splits it:
// attention by heads (query heads divided; KV heads divided too, or replicated when there are
// fewer of them than ranks), the dense MLP, every expert and the shared expert by intermediate
// columns (gate/up column-parallel, down row-parallel), o_proj row-parallel, and the embedding and
// lm_head by vocabulary rows. Each row-parallel output is a partial sum: one all-reduce per
// attention block and one per MLP/MoE block complete it. The plan is pure arithmetic on the
// config, so every rank derives the same one.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "models/linear_loader.h"
#include "models/model_config.h"

namespace qs::models {

struct TensorParallelPlan {
  int rank = 0, size = 1;
  int64_t head_dim = 0;
  int64_t heads_begin = 0, heads = 0;  // this rank's query heads
  int64_t kv_begin = 0, kv_heads = 0;  // its KV heads (one replicated head when size > n_kv)
  int64_t inter_begin = 0, inter = 0;  // the dense MLP's columns
  int64_t expert_inter_begin = 0, expert_inter = 0;
  int64_t shared_inter_begin = 0, shared_inter = 0;
  // Vocabulary rows [vocab_begin, vocab_begin + vocab_count) of the embedding and lm_head; every
  // rank's slice is padded to vocab_padded rows for the logits' all-gather (the last is shorter).
  int64_t vocab_begin = 0, vocab_count = 0, vocab_padded = 0;

  // The plan of `rank` of `size`, or an error naming the dimension that does not divide
  // (query heads, KV heads, intermediate sizes), as vLLM refuses such a split.
  static Result<TensorParallelPlan> make(const ModelConfig& config, int rank, int size);

  bool split() const { return size > 1; }
  // The config this rank's blocks run with: its heads and columns in place of the model's.
  ModelConfig local(const ModelConfig& config) const;
  // The shard of a layer's linear this rank loads.
  LinearShard shard_of(const LayerLinear& l) const;
  // lm_head's (and the tied embedding's) rows.
  LinearShard vocab_shard() const;
  // Whether this rank adds the biases of row-parallel linears (o_proj, down_proj): only one
  // rank may, or the all-reduce would count them `size` times.
  bool owns_row_parallel_bias() const { return rank == 0; }
};

}  // namespace qs::models
