// engine: KV-cache memory budgets (see memory_budget.h).
#include "engine/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace qs::engine {

int64_t kv_cache_bytes_per_token(const models::ModelConfig& c, DType cache_dtype) {
  return 2 * static_cast<int64_t>(dtype_size(cache_dtype)) * c.n_layers * c.n_kv_heads * c.head_dim;
}

Result<int64_t> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    int64_t kib = 0;
    if (fields >> key >> kib >> unit && key == "MemAvailable:") return kib * 1024;
  }
  return not_found("MemAvailable not found in /proc/meminfo");
}

Result<int64_t> kv_cache_bytes_from_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return invalid_argument("the KV-cache memory fraction must be in (0, 1], got " +
                            std::to_string(fraction));
  }
  QS_ASSIGN_OR_RETURN(int64_t available, available_memory_bytes());
  return static_cast<int64_t>(fraction * static_cast<double>(available));
}

Result<int64_t> kv_cache_bytes_for_tokens(const models::ModelConfig& config, int64_t n_tokens,
                                          int64_t block_size, DType cache_dtype) {
  const int64_t n_blocks = (n_tokens + block_size - 1) / block_size;
  const double bytes = static_cast<double>(kv_cache_bytes_per_token(config, cache_dtype)) *
                       static_cast<double>(n_blocks) * static_cast<double>(block_size);
  const double ram_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (ram_bytes > 0 && bytes > 0.5 * ram_bytes) {
    char msg[256];
    std::snprintf(msg, sizeof(msg),
                  "the KV cache for %lld tokens would need %.1f GiB, more than half of this "
                  "machine's %.1f GiB; lower max_tokens or the number of requests",
                  static_cast<long long>(n_blocks * block_size), bytes / (1 << 30),
                  ram_bytes / (1 << 30));
    return out_of_range(msg);
  }
  return static_cast<int64_t>(bytes);
}

Result<int64_t> serving_kv_cache_bytes(const models::ModelConfig& config,
                                       const ServingKvCacheSize& size) {
  if (size.bytes) {
    if (*size.bytes < 1) {
      return invalid_argument("the KV cache size must be positive, got " +
                              std::to_string(*size.bytes) + " bytes");
    }
    return *size.bytes;
  }
  if (size.memory_fraction) return kv_cache_bytes_from_memory_fraction(*size.memory_fraction);
  QS_ASSIGN_OR_RETURN(int64_t available, available_memory_bytes());
  const double one_sequence =
      static_cast<double>(kv_cache_bytes_per_token(config, size.cache_dtype)) *
      static_cast<double>(size.max_model_len + size.block_size);
  const double wanted = one_sequence * static_cast<double>(size.max_num_seqs);
  const double cap = 0.25 * static_cast<double>(available);
  return static_cast<int64_t>(std::max(std::min(wanted, cap), one_sequence));
}

}  // namespace qs::engine
