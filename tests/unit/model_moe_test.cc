// tests: the Mixture-of-Experts families below the goldens: config keys and their errors, the
// tensor list, the router (softmax, top-k, ties, renormalisation), the grouped expert block
// against a plain loop that runs every expert on every token, load errors that name the
// tensor, and the active-parameter byte count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "../common/prompt_logits.h"
#include "core/json.h"
#include "engine/kv_cache.h"
#include "model_random_checkpoint.h"
#include "models/blocks.h"
#include "models/model.h"

namespace qs::models {
namespace {

using qs::testing::CheckpointEdits;
using qs::testing::fresh_dir;
using qs::testing::tiny_config;
using qs::testing::write_random_checkpoint;

nlohmann::json qwen3_moe() {
  auto c = tiny_config("Qwen3MoeForCausalLM");
  c.update({{"num_experts", 6},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 16},
            {"norm_topk_prob", true},
            {"head_dim", 8}});
  return c;
}

TEST(MoeConfig, Qwen3MoeKeysAndLayers) {
  auto c = qwen3_moe();
  c["num_hidden_layers"] = 4;
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = {3};
  auto m = parse_model_config(c);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->moe.n_experts, 6);
  EXPECT_EQ(m->moe.top_k, 2);
  EXPECT_EQ(m->moe.expert_intermediate, 16);
  EXPECT_TRUE(m->moe.norm_topk_prob);
  EXPECT_TRUE(m->qk_norm);
  // (layer + 1) % 2 == 0 and not in mlp_only_layers: only layer 1.
  EXPECT_EQ(m->moe_layer, (std::vector<bool>{false, true, false, false}));
  // head_dim defaults to hidden / heads for Qwen3-MoE (not 128 as for dense Qwen3).
  c.erase("head_dim");
  EXPECT_EQ(parse_model_config(c)->head_dim, 8);
}

TEST(MoeConfig, ExpertCountUnderEitherName) {
  auto c = qwen3_moe();
  c.erase("num_experts");
  c["num_local_experts"] = 5;  // what transformers 5 writes for Qwen3-MoE
  EXPECT_EQ(parse_model_config(c)->moe.n_experts, 5);
}

TEST(MoeConfig, MixtralAlwaysRenormalisesAndUsesItsNames) {
  auto c = tiny_config("MixtralForCausalLM");
  c.update({{"num_local_experts", 4}, {"num_experts_per_tok", 2}});
  auto m = parse_model_config(c);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->moe.norm_topk_prob);
  EXPECT_EQ(m->moe.expert_intermediate, 48);
  EXPECT_EQ(mlp_names(*m, 1, 3).up, "model.layers.1.block_sparse_moe.experts.3.w3");
  EXPECT_EQ(router_name(*m, 0), "model.layers.0.block_sparse_moe.gate");
}

TEST(MoeConfig, Qwen2MoeSharedExpertTensors) {
  auto c = tiny_config("Qwen2MoeForCausalLM");
  c.update({{"num_experts", 4},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 16},
            {"shared_expert_intermediate_size", 24}});
  auto m = parse_model_config(c);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->qkv_bias);
  bool router = false, shared_gate = false, shared_up = false;
  for (const auto& t : expected_tensors(*m)) {
    if (t.name == "model.layers.0.mlp.gate.weight") {
      router = true;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 32}));
      EXPECT_FALSE(t.linear);
    }
    if (t.name == "model.layers.0.mlp.shared_expert_gate.weight") {
      shared_gate = true;
      EXPECT_FALSE(t.linear);
    }
    if (t.name == "model.layers.1.mlp.shared_expert.up_proj.weight") {
      shared_up = true;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{24, 32}));
      EXPECT_TRUE(t.linear);
    }
  }
  EXPECT_TRUE(router && shared_gate && shared_up);
}

TEST(MoeConfig, BadRoutingFieldsAreNamed) {
  struct Case {
    nlohmann::json patch;
    std::string needle;
  };
  for (const Case& k : std::vector<Case>{
           {{{"num_experts_per_tok", 7}},
            "'num_experts_per_tok' (7) must be in 1..num_experts (6)"},
           {{{"num_experts_per_tok", 0}}, "num_experts_per_tok"},
           {{{"num_experts", 0}}, "'num_experts' must be in 1.."},
           {{{"num_experts", nullptr}}, "'num_experts' (or 'num_local_experts') is missing"},
           {{{"moe_intermediate_size", -3}}, "moe_intermediate_size"},
           {{{"decoder_sparse_step", 0}}, "decoder_sparse_step"},
           {{{"mlp_only_layers", {5}}}, "'mlp_only_layers' holds 5"},
           {{{"norm_topk_prob", "yes"}}, "norm_topk_prob"}}) {
    auto c = qwen3_moe();
    c.update(k.patch);
    auto m = parse_model_config(c);
    ASSERT_FALSE(m.ok()) << k.patch.dump();
    EXPECT_NE(m.status().message().find(k.needle), std::string::npos) << m.status().message();
  }
  auto c = qwen3_moe();
  c.erase("num_experts_per_tok");
  EXPECT_FALSE(parse_model_config(c).ok());
}

TEST(MoeRouter, TopKOfTheSoftmaxWithTiesToTheLowerId) {
  MoeConfig moe;
  moe.n_experts = 5;
  moe.top_k = 2;
  // Token 0: experts 1 and 3 tie for first; token 1: a clear order 4 > 0.
  std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f, 1.5f, -2.0f, 0.0f, 0.5f, 3.0f};
  std::vector<float> probs = logits;
  std::vector<int32_t> routes(4);
  std::vector<float> weights(4);
  route_top_k(moe, probs.data(), 2, routes.data(), weights.data());
  EXPECT_EQ(routes, (std::vector<int32_t>{1, 3, 4, 0}));
  double z = 0;
  for (int e = 0; e < 5; ++e) z += std::exp(logits[e] - 2.0);
  EXPECT_NEAR(weights[0], 1.0 / z, 1e-6);
  EXPECT_EQ(weights[0], weights[1]);
  // Renormalised: the two weights of each token sum to 1, in the same ratio.
  moe.norm_topk_prob = true;
  probs = logits;
  route_top_k(moe, probs.data(), 2, routes.data(), weights.data());
  EXPECT_NEAR(weights[0] + weights[1], 1.0f, 1e-6);
  EXPECT_NEAR(weights[2] + weights[3], 1.0f, 1e-6);
  EXPECT_NEAR(weights[2] / weights[3], std::exp(3.0 - 1.5), 1e-4);
}

// Every expert on every token, weighted by the token's routing (0 for experts not chosen):
// what the grouped block must equal.
std::vector<float> moe_by_loop(const ModelConfig& c, const MoeWeights& w, const float* h, int64_t n,
                               ThreadPool& pool) {
  const int64_t hidden = c.hidden_size;
  std::vector<float> probs(n * c.moe.n_experts), weights(n * c.moe.top_k);
  std::vector<int32_t> routes(n * c.moe.top_k);
  const Tensor router = Tensor::from_f32(DType::kF32, {c.moe.n_experts, hidden}, w.router);
  EXPECT_TRUE(ops::linear(h, n, router, nullptr, probs.data(), pool).ok());
  route_top_k(c.moe, probs.data(), n, routes.data(), weights.data());
  std::vector<float> out(n * hidden, 0.0f), y(hidden);
  BlockScratch s;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < c.moe.top_k; ++j) {
      const int32_t e = routes[t * c.moe.top_k + j];
      EXPECT_TRUE(mlp_block(w.experts[e], h + t * hidden, 1, s, y.data(), pool).ok());
      for (int64_t d = 0; d < hidden; ++d) {
        out[t * hidden + d] += weights[t * c.moe.top_k + j] * y[d];
      }
    }
    if (!w.shared.empty()) {
      EXPECT_TRUE(mlp_block(w.shared, h + t * hidden, 1, s, y.data(), pool).ok());
      float g = 0;
      for (int64_t d = 0; d < hidden; ++d) g += w.shared_gate[d] * h[t * hidden + d];
      g = 1.0f / (1.0f + std::exp(-g));
      for (int64_t d = 0; d < hidden; ++d) out[t * hidden + d] += g * y[d];
    }
  }
  return out;
}

TEST(MoeBlock, GroupedExpertsEqualEveryTokenRunAlone) {
  for (const char* arch : {"Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"}) {
    auto config = qwen3_moe();
    config["architectures"] = {arch};
    config["shared_expert_intermediate_size"] = 24;
    const std::string dir = fresh_dir(std::string("moe_block_") + arch);
    write_random_checkpoint(dir, config, DType::kF32, 5);
    auto m = Model::load(dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const ModelConfig& c = (*m)->config();
    const MoeWeights& w = (*m)->layer(0).moe;
    ASSERT_EQ(w.shared.empty(), std::string(arch) == "Qwen3MoeForCausalLM");
    const int64_t n = 37;
    std::mt19937 rng(3);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    std::vector<float> h(n * c.hidden_size);
    for (auto& v : h) v = noise(rng);
    ThreadPool pool(2);
    BlockScratch s;
    std::vector<float> got(n * c.hidden_size);
    ASSERT_TRUE(moe_block(c, w, h.data(), n, s, got.data(), pool).ok());
    const std::vector<float> want = moe_by_loop(c, w, h.data(), n, pool);
    std::vector<int64_t> used(c.moe.n_experts);
    for (int32_t e : s.routes) ++used.at(e);
    for (int64_t e = 0; e < c.moe.n_experts; ++e) EXPECT_GT(used[e], 0) << "expert " << e;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i]))) << arch << " " << i;
    }
  }
}

TEST(MoeLoad, MissingExpertAndWrongRouterAreNamed) {
  const std::string dir = fresh_dir("moe_missing");
  CheckpointEdits edits;
  edits.skip = "model.layers.1.mlp.experts.4.down_proj.weight";
  edits.reshape_name = "model.layers.0.mlp.gate.weight";
  edits.reshape_to = {5, 32};
  write_random_checkpoint(dir, qwen3_moe(), DType::kBF16, 1, edits);
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("model.layers.1.mlp.experts.4.down_proj"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'model.layers.0.mlp.gate.weight' has shape [5, 32], expected [6, 32]"),
            std::string::npos)
      << msg;
}

TEST(MoeLoad, DecodeBytesCountTheActiveExperts) {
  const std::string dir = fresh_dir("moe_bytes");
  write_random_checkpoint(dir, qwen3_moe(), DType::kBF16, 1);
  auto m = Model::load(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  size_t experts = 0, others = 0;
  for (const auto& l : (*m)->linears()) {
    (l.routed_expert ? experts : others) += l.weight->resident_bytes();
  }
  ASSERT_GT(experts, 0u);
  const size_t embed = 97 * 32 * 2;  // bf16 [vocab, hidden], untied: resident, not streamed
  const size_t small = (*m)->resident_weight_bytes() - experts - others - embed;
  // f32 norms and routers: 2 layers x (2 norms of 32, q/k-norm of 8, router 6 x 32), final norm.
  EXPECT_EQ(small, (2 * (2 * 32 + 2 * 8 + 6 * 32) + 32) * sizeof(float));
  // top-2 of 6 experts: a third of the expert bytes per token.
  EXPECT_EQ((*m)->decode_weight_bytes(), others + experts / 3 + small);
}

}  // namespace
}  // namespace qs::models

namespace qs::models {
namespace {

// The counters behind quantserve:moe_* metrics: every (token, expert) pair, and one read per
// distinct expert per layer per call, so batching tokens that share experts shows as fewer
// reads than pairs.
TEST(MoeForward, CountsRoutedPairsAndExpertReads) {
  const std::string dir = qs::testing::fresh_dir("moe_counts");
  qs::testing::write_random_checkpoint(dir, qwen3_moe(), DType::kF32, 2);
  auto m = Model::load(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = (*m)->config();
  const int64_t n = 24;
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, 2, 16});
  ASSERT_TRUE(cache.reserve(0, n).ok());
  ForwardBatch batch;
  for (int64_t t = 0; t < n; ++t) batch.token_ids.push_back(static_cast<int32_t>(3 * t % 97));
  batch.seqs = {{0, n, 0, cache.block_table(0)}};
  std::vector<int32_t> routes;
  ForwardBatch::MoeCounts counts;
  batch.routes = &routes;
  batch.moe_counts = &counts;
  std::vector<float> logits;
  ThreadPool pool(1);
  ASSERT_TRUE((*m)->forward(batch, cache.layers(), pool, &logits).ok());
  const int64_t k = c.moe.top_k, layers = c.n_layers;
  EXPECT_EQ(counts.routed_slots, layers * n * k);
  int64_t distinct = 0;
  for (int64_t l = 0; l < layers; ++l) {
    std::set<int32_t> used(routes.begin() + l * n * k, routes.begin() + (l + 1) * n * k);
    distinct += static_cast<int64_t>(used.size());
  }
  EXPECT_EQ(counts.expert_reads, distinct);
  EXPECT_LE(counts.expert_reads, layers * c.moe.n_experts);
}

}  // namespace
}  // namespace qs::models

namespace qs::models {
namespace {

// transformers 5's in-memory layout, which some checkpoints store: each layer's experts as
// mlp.experts.gate_up_proj [E, 2I, H] (gate rows, then up rows) and mlp.experts.down_proj
// [E, H, I]. The same weights either way must give the same logits, bit for bit.
TEST(MoeLoad, FusedExpertTensorsEqualPerExpertOnes) {
  const std::string split = fresh_dir("moe_split"), fused = fresh_dir("moe_fused");
  const auto config = qwen3_moe();
  write_random_checkpoint(split, config, DType::kBF16, 9);
  auto ckpt = io::Checkpoint::open(split);
  ASSERT_TRUE(ckpt.ok());
  const ModelConfig c = *parse_model_config(config);
  const int64_t E = c.moe.n_experts, I = c.moe.expert_intermediate, H = c.hidden_size;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : ckpt->names()) {
    if (name.find(".mlp.experts.") == std::string::npos)
      tensors.emplace_back(name, *ckpt->get(name));
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::vector<float> gate_up, down;
    for (int64_t e = 0; e < E; ++e) {
      const MlpNames n = mlp_names(c, l, e);
      for (const std::string* part : {&n.gate, &n.up}) {
        const auto v = ckpt->get(*part + ".weight")->to_f32();
        gate_up.insert(gate_up.end(), v.begin(), v.end());
      }
      const auto v = ckpt->get(n.down + ".weight")->to_f32();
      down.insert(down.end(), v.begin(), v.end());
    }
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    tensors.emplace_back(p + "gate_up_proj",
                         Tensor::from_f32(DType::kBF16, {E, 2 * I, H}, gate_up));
    tensors.emplace_back(p + "down_proj", Tensor::from_f32(DType::kBF16, {E, H, I}, down));
  }
  ASSERT_TRUE(write_json(fused + "/config.json", config).ok());
  ASSERT_TRUE(io::write_safetensors(fused + "/model.safetensors", tensors).ok());
  const std::vector<int32_t> ids = {1, 5, 9, 44, 2, 70, 13, 13, 96, 0};
  const auto a = qs::testing::prompt_logits(split, ids), b = qs::testing::prompt_logits(fused, ids);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;

  // A fused tensor of the wrong shape is named with both shapes.
  tensors.back().second =
      Tensor::from_f32(DType::kBF16, {E, H, I + 1}, std::vector<float>(E * H * (I + 1), 0.5f));
  ASSERT_TRUE(io::write_safetensors(fused + "/model.safetensors", tensors).ok());
  auto broken = Model::load(fused);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("'model.layers.1.mlp.experts.down_proj' has shape [6, "
                                           "32, 17], expected [6, 32, 16]"),
            std::string::npos)
      << broken.status().message();
}

}  // namespace
}  // namespace qs::models
