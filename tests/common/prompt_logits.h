// tests: the logits of every position of one prompt, run as a single sequence through the
// batched paged forward (a KV cache just large enough), for comparing two checkpoints.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace qs::testing {

inline std::vector<float> prompt_logits(const models::Model& model, const std::vector<int32_t>& ids,
                                        int threads = 2) {
  const models::ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(ids.size());
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (n + 15) / 16, 16});
  EXPECT_TRUE(cache.reserve(0, n).ok());
  models::ForwardBatch batch;
  batch.token_ids = ids;
  batch.seqs = {{0, n, 0, cache.block_table(0)}};
  batch.all_logits = true;
  ThreadPool pool(threads);
  std::vector<float> logits;
  const Status s = model.forward(batch, cache.layers(), pool, &logits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return logits;
}

// The same for the checkpoint in `dir` (empty when it does not load, with a failure).
inline std::vector<float> prompt_logits(const std::string& dir, const std::vector<int32_t>& ids) {
  auto model = models::Model::load(dir);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  return prompt_logits(**model, ids);
}

}  // namespace qs::testing
