// models: TensorParallelPlan (see tensor_parallel.h).
#include "models/tensor_parallel.h"

#include <algorithm>
#include <string>

namespace qs::models {
namespace {

Status check_divides(const char* what, int64_t value, int size) {
  if (value % size == 0) return ok_status();
  return invalid_argument("--tensor-parallel-size " + std::to_string(size) + " does not divide " +
                          what + " (" + std::to_string(value) + ")");
}

}  // namespace

Result<TensorParallelPlan> TensorParallelPlan::make(const ModelConfig& c, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return invalid_argument("tensor parallel rank " + std::to_string(rank) + " of " +
                            std::to_string(size));
  }
  TensorParallelPlan p;
  p.rank = rank;
  p.size = size;
  p.head_dim = c.head_dim;
  QS_RETURN_IF_ERROR(check_divides("the attention heads", c.n_heads, size));
  if (c.n_kv_heads % size != 0 && size % c.n_kv_heads != 0) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(size) +
                            " must divide the KV heads (" + std::to_string(c.n_kv_heads) +
                            ") or be a multiple of them");
  }
  p.heads = c.n_heads / size;
  p.heads_begin = rank * p.heads;
  if (c.n_kv_heads >= size) {
    p.kv_heads = c.n_kv_heads / size;
    p.kv_begin = rank * p.kv_heads;
  } else {
    // Each KV head serves size / n_kv consecutive ranks, whose query heads all belong to it.
    p.kv_heads = 1;
    p.kv_begin = rank * c.n_kv_heads / size;
  }
  bool any_dense = false;
  for (int64_t i = 0; i < c.n_layers; ++i) any_dense = any_dense || !is_moe_layer(c, i);
  if (any_dense) {
    QS_RETURN_IF_ERROR(check_divides("intermediate_size", c.intermediate_size, size));
    p.inter = c.intermediate_size / size;
    p.inter_begin = rank * p.inter;
  }
  if (c.moe.n_experts > 0) {
    QS_RETURN_IF_ERROR(check_divides("moe_intermediate_size", c.moe.expert_intermediate, size));
    p.expert_inter = c.moe.expert_intermediate / size;
    p.expert_inter_begin = rank * p.expert_inter;
    if (c.moe.shared_intermediate > 0) {
      QS_RETURN_IF_ERROR(
          check_divides("shared_expert_intermediate_size", c.moe.shared_intermediate, size));
      p.shared_inter = c.moe.shared_intermediate / size;
      p.shared_inter_begin = rank * p.shared_inter;
    }
  }
  p.vocab_padded = (c.vocab_size + size - 1) / size;
  p.vocab_begin = std::min<int64_t>(rank * p.vocab_padded, c.vocab_size);
  p.vocab_count = std::min<int64_t>(p.vocab_padded, c.vocab_size - p.vocab_begin);
  if (p.vocab_count <= 0) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(size) + " leaves rank " +
                            std::to_string(rank) + " no vocabulary rows");
  }
  return p;
}

ModelConfig TensorParallelPlan::local(const ModelConfig& c) const {
  ModelConfig l = c;
  if (!split()) return l;
  l.n_heads = heads;
  l.n_kv_heads = kv_heads;
  l.intermediate_size = inter;
  l.moe.expert_intermediate = expert_inter;
  l.moe.shared_intermediate = shared_inter;
  return l;
}

LinearShard TensorParallelPlan::shard_of(const LayerLinear& l) const {
  if (!split()) return {};
  using Axis = LinearShard::Axis;
  switch (l.role) {
    case LinearRole::kQ:
      return {Axis::kRows, heads_begin * head_dim, heads * head_dim};
    case LinearRole::kK:
    case LinearRole::kV:
      return {Axis::kRows, kv_begin * head_dim, kv_heads * head_dim};
    case LinearRole::kO:
      return {Axis::kCols, heads_begin * head_dim, heads * head_dim};
    default:
      break;
  }
  const int64_t begin = l.shared        ? shared_inter_begin
                        : l.expert >= 0 ? expert_inter_begin
                                        : inter_begin;
  const int64_t count = l.shared ? shared_inter : l.expert >= 0 ? expert_inter : inter;
  return {l.role == LinearRole::kDown ? Axis::kCols : Axis::kRows, begin, count};
}

LinearShard TensorParallelPlan::vocab_shard() const {
  if (!split()) return {};
  return {LinearShard::Axis::kRows, vocab_begin, vocab_count};
}

}  // namespace qs::models
