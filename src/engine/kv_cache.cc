// engine: KvCache.
#include "engine/kv_cache.h"

#include <new>
#include <string>

#include "core/check.h"
#include "core/log.h"

namespace qs::engine {

Result<DType> parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kF8E4M3;
  if (name == "fp8_e5m2") return DType::kF8E5M2;
  return invalid_argument("--kv-cache-dtype: unknown or unsupported '" + std::string(name) +
                          "'; choose auto, bfloat16, fp8, fp8_e4m3 or fp8_e5m2");
}

const char* kv_cache_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "auto";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF8E4M3:
      return "fp8_e4m3";
    case DType::kF8E5M2:
      return "fp8_e5m2";
    default:
      return dtype_name(t);
  }
}

namespace {

Tensor allocate(ops::Backend& backend, DType dtype, const std::vector<int64_t>& shape) {
  Result<Tensor> t = backend.zeros(dtype, shape);
  if (!t.ok()) {
    QS_LOG_ERROR("KV cache: %s", t.status().message().c_str());
    throw std::bad_alloc();
  }
  return std::move(t).value();
}

}  // namespace

KvCache::KvCache(const KvCacheConfig& config, ops::Backend& backend)
    : config_(config), allocator_(config.n_blocks) {
  QS_CHECK(config.n_layers > 0 && config.n_kv_heads > 0 && config.head_dim > 0 &&
           config.block_size > 0);
  QS_CHECK(ops::kv_cache_dtype_supported(config.dtype));
  QS_CHECK(config.k_scales.empty() ||
           static_cast<int64_t>(config.k_scales.size()) == config.n_layers);
  QS_CHECK(config.v_scales.empty() ||
           static_cast<int64_t>(config.v_scales.size()) == config.n_layers);
  const std::vector<int64_t> shape = {config.n_blocks, config.block_size, config.n_kv_heads,
                                      config.head_dim};
  for (int64_t i = 0; i < config.n_layers; ++i) {
    k_.push_back(allocate(backend, config.dtype, shape));
    v_.push_back(allocate(backend, config.dtype, shape));
    ops::PagedKvLayer view;
    view.dtype = config.dtype;
    if (!config.k_scales.empty()) view.k_scale = config.k_scales[i];
    if (!config.v_scales.empty()) view.v_scale = config.v_scales[i];
    view.k = k_.back().writable_data;
    view.v = v_.back().writable_data;
    view.n_blocks = config.n_blocks;
    view.block_size = config.block_size;
    view.n_kv_heads = config.n_kv_heads;
    view.head_dim = config.head_dim;
    views_.push_back(view);
  }
}

int64_t KvCache::size_bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < k_.size(); ++i) total += k_[i].nbytes() + v_[i].nbytes();
  return total;
}

Status KvCache::reserve(int64_t seq_id, int64_t n_tokens) {
  std::vector<int32_t>& table = tables_[seq_id];
  const int64_t need = (n_tokens + config_.block_size - 1) / config_.block_size;
  const int64_t have = static_cast<int64_t>(table.size());
  if (need <= have) return ok_status();
  Status s = allocator_.allocate(need - have, &table);
  if (!s.ok()) {
    if (table.empty()) tables_.erase(seq_id);
    return s.with_context("sequence " + std::to_string(seq_id) + " needs " +
                          std::to_string(n_tokens) + " tokens (block size " +
                          std::to_string(config_.block_size) + ")");
  }
  return ok_status();
}

void KvCache::release(int64_t seq_id) {
  auto it = tables_.find(seq_id);
  if (it == tables_.end()) return;
  allocator_.free(it->second);
  tables_.erase(it);
}

const std::vector<int32_t>& KvCache::block_table(int64_t seq_id) const {
  auto it = tables_.find(seq_id);
  QS_CHECK_MSG(it != tables_.end(), "block table of an unknown sequence");
  return it->second;
}

}  // namespace qs::engine
