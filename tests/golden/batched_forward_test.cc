// golden: the batched paged forward gives every sequence the logits it gets alone. Several
// sequences of different lengths in one call, and calls that mix prefill chunks with decode
// steps, are compared token by token with each sequence run by itself in one prefill, for
// every family (Mistral with a sliding window shorter than the sequences).
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "../unit/model_random_checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace qs {
namespace {

using models::ForwardBatch;
using models::Model;

struct Case {
  std::string name;
  nlohmann::json config;
};

// gtest prints test parameters; without this it would dump the struct's raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* arch : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    out.push_back({arch, testing::tiny_config(arch)});
  }
  auto mistral = testing::tiny_config("MistralForCausalLM");
  mistral["sliding_window"] = 6;
  out.push_back({"MistralWindow6", mistral});
  // MoE: tokens of different sequences share experts in one call, so the grouping by expert
  // must not mix them up.
  auto qwen3_moe = testing::tiny_config("Qwen3MoeForCausalLM");
  qwen3_moe.update({{"num_experts", 6},
                    {"num_experts_per_tok", 2},
                    {"moe_intermediate_size", 16},
                    {"norm_topk_prob", true},
                    {"head_dim", 8}});
  out.push_back({"Qwen3Moe", qwen3_moe});
  auto qwen2_moe = testing::tiny_config("Qwen2MoeForCausalLM");
  qwen2_moe.update({{"num_experts", 4},
                    {"num_experts_per_tok", 3},
                    {"moe_intermediate_size", 16},
                    {"shared_expert_intermediate_size", 24}});
  out.push_back({"Qwen2MoeShared", qwen2_moe});
  auto mixtral = testing::tiny_config("MixtralForCausalLM");
  mixtral.update({{"num_local_experts", 4}, {"num_experts_per_tok", 2}});
  out.push_back({"Mixtral", mixtral});
  return out;
}

std::vector<std::vector<int32_t>> random_sequences(const std::vector<int64_t>& lengths,
                                                   int64_t vocab) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t n : lengths) {
    std::vector<int32_t> s(n);
    for (auto& t : s) t = id(rng);
    seqs.push_back(s);
  }
  return seqs;
}

engine::KvCache make_cache(const models::ModelConfig& c, int64_t n_blocks) {
  return engine::KvCache({c.n_layers, c.n_kv_heads, c.head_dim, n_blocks, 16});
}

// Every token's logits of one sequence run alone, in one prefill: [n, vocab].
std::vector<float> alone(const Model& m, const std::vector<int32_t>& tokens, ThreadPool& pool) {
  auto cache = make_cache(m.config(), 8);
  EXPECT_TRUE(cache.reserve(0, static_cast<int64_t>(tokens.size())).ok());
  ForwardBatch b;
  b.token_ids = tokens;
  b.seqs = {{0, static_cast<int64_t>(tokens.size()), 0, cache.block_table(0)}};
  b.all_logits = true;
  std::vector<float> logits;
  Status s = m.forward(b, cache.layers(), pool, &logits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return logits;
}

void expect_rows_equal(const float* got, const float* want, int64_t vocab,
                       const std::string& what) {
  for (int64_t j = 0; j < vocab; ++j) {
    ASSERT_NEAR(got[j], want[j], 1e-5f * std::max(1.0f, std::fabs(want[j])))
        << what << " vocab " << j;
  }
}

class BatchedForward : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir("batched_" + GetParam().name);
    testing::write_random_checkpoint(dir_, GetParam().config, DType::kBF16, 5);
    auto m = Model::load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::string dir_;
  std::unique_ptr<Model> model_;
  ThreadPool pool_{1};
};

TEST_P(BatchedForward, SequencesOfDifferentLengthsInOneCall) {
  const int64_t vocab = model_->config().vocab_size;
  const auto seqs = random_sequences({1, 7, 16, 17, 40}, vocab);
  auto cache = make_cache(model_->config(), 16);
  ForwardBatch b;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(seqs[i].size());
    ASSERT_TRUE(cache.reserve(static_cast<int64_t>(i), n).ok());
    b.seqs.push_back({static_cast<int64_t>(b.token_ids.size()), n, 0,
                      cache.block_table(static_cast<int64_t>(i))});
    b.token_ids.insert(b.token_ids.end(), seqs[i].begin(), seqs[i].end());
  }
  for (bool all : {true, false}) {
    b.all_logits = all;
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(b, cache.layers(), pool_, &logits).ok());
    ASSERT_EQ(logits.size(), (all ? b.token_ids.size() : seqs.size()) * vocab);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const auto want = alone(*model_, seqs[i], pool_);
      const int64_t n = static_cast<int64_t>(seqs[i].size());
      for (int64_t t = all ? 0 : n - 1; t < n; ++t) {
        const int64_t row = all ? b.seqs[i].query_start + t : static_cast<int64_t>(i);
        expect_rows_equal(logits.data() + row * vocab, want.data() + t * vocab, vocab,
                          "seq " + std::to_string(i) + " token " + std::to_string(t));
      }
    }
  }
}

// Three calls, as a continuous-batching scheduler would issue them:
//   1: A prefill [0, 10)            B prefill chunk [0, 20)
//   2: A decode 10                  B prefill chunk [20, 33)   C prefill [0, 5)
//   3: A decode 11   B decode 33    C decode 5
TEST_P(BatchedForward, PrefillChunksAndDecodeStepsMixed) {
  const int64_t vocab = model_->config().vocab_size;
  const auto seqs = random_sequences({12, 34, 6}, vocab);
  auto cache = make_cache(model_->config(), 16);
  struct Part {
    int seq;
    int64_t start, n;
  };
  const std::vector<std::vector<Part>> calls = {
      {{0, 0, 10}, {1, 0, 20}},
      {{0, 10, 1}, {1, 20, 13}, {2, 0, 5}},
      {{0, 11, 1}, {1, 33, 1}, {2, 5, 1}},
  };
  std::vector<std::vector<float>> want;
  for (const auto& s : seqs) want.push_back(alone(*model_, s, pool_));
  for (size_t k = 0; k < calls.size(); ++k) {
    ForwardBatch b;
    b.all_logits = true;
    for (const Part& p : calls[k]) {
      ASSERT_TRUE(cache.reserve(p.seq, p.start + p.n).ok());
      b.seqs.push_back(
          {static_cast<int64_t>(b.token_ids.size()), p.n, p.start, cache.block_table(p.seq)});
      b.token_ids.insert(b.token_ids.end(), seqs[p.seq].begin() + p.start,
                         seqs[p.seq].begin() + p.start + p.n);
    }
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(b, cache.layers(), pool_, &logits).ok());
    for (size_t i = 0; i < calls[k].size(); ++i) {
      const Part& p = calls[k][i];
      for (int64_t j = 0; j < p.n; ++j) {
        expect_rows_equal(logits.data() + (b.seqs[i].query_start + j) * vocab,
                          want[p.seq].data() + (p.start + j) * vocab, vocab,
                          "call " + std::to_string(k) + " seq " + std::to_string(p.seq) + " pos " +
                              std::to_string(p.start + j));
      }
    }
  }
}

// Same batch on one thread and on three: the split over threads must not change results.
TEST_P(BatchedForward, ThreadCountDoesNotChangeLogits) {
  const int64_t vocab = model_->config().vocab_size;
  const auto seqs = random_sequences({9, 23}, vocab);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    auto cache = make_cache(model_->config(), 8);
    ForwardBatch b;
    b.all_logits = true;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_TRUE(
          cache.reserve(static_cast<int64_t>(i), static_cast<int64_t>(seqs[i].size())).ok());
      b.seqs.push_back({static_cast<int64_t>(b.token_ids.size()),
                        static_cast<int64_t>(seqs[i].size()), 0,
                        cache.block_table(static_cast<int64_t>(i))});
      b.token_ids.insert(b.token_ids.end(), seqs[i].begin(), seqs[i].end());
    }
    std::vector<float> logits;
    ASSERT_TRUE(model_->forward(b, cache.layers(), pool, &logits).ok());
    results.push_back(logits);
  }
  for (size_t r = 0; r < results[0].size() / vocab; ++r) {
    expect_rows_equal(results[1].data() + r * vocab, results[0].data() + r * vocab, vocab,
                      "row " + std::to_string(r));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, BatchedForward, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace qs
