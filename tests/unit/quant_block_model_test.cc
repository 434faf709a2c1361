// quant: the tuner's block forward (quant/block.h) computes what the engine's decoder layer
// (models::decoder_layer, which Model::forward runs) computes, for Llama with llama3
// rope scaling, Qwen2 (q/k/v bias), Qwen3 (q/k-norm, head_dim != hidden / n_heads) and the
// Mixture-of-Experts families (Qwen3-MoE renormalised top-k, Qwen2-MoE with its gated shared
// expert, Mixtral), on a layer copied with copy_block, which walks models::layer_linears as the
// loader does; and copy_block refuses quantized or misshapen weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "models/blocks.h"
#include "quant/block.h"
#include "quant/block_tuner.h"

namespace qs::quant {
namespace {

models::ModelConfig config_for(models::Family family) {
  models::ModelConfig c;
  c.family = family;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = family == models::Family::kQwen3 ? 12 : 8;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6;
  c.qkv_bias = family == models::Family::kQwen2 || family == models::Family::kQwen2Moe;
  c.qk_norm = family == models::Family::kQwen3 || family == models::Family::kQwen3Moe;
  if (family == models::Family::kQwen3Moe || family == models::Family::kQwen2Moe ||
      family == models::Family::kMixtral) {
    c.moe_layer = {true};
    c.moe.n_experts = family == models::Family::kMixtral ? 4 : 8;
    c.moe.top_k = 2;
    c.moe.expert_intermediate = 16;
    c.moe.norm_topk_prob = family != models::Family::kQwen2Moe;
    c.moe.shared_intermediate = family == models::Family::kQwen2Moe ? 40 : 0;
    c.moe.naming = family == models::Family::kMixtral ? models::ExpertNaming::kMixtral
                                                      : models::ExpertNaming::kQwen;
  }
  if (family == models::Family::kLlama) {
    c.rope.theta = 500000.0;
    c.rope.scaling = models::RopeScaling::kLlama3;
    c.rope.factor = 8.0;
    c.rope.original_max_position_embeddings = 16;
  }
  return c;
}

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor random_weight(std::mt19937& rng, int64_t n, int64_t k) {
  const float b = 1.5f / std::sqrt(static_cast<float>(k));
  return Tensor::from_f32(DType::kF32, {n, k}, random_floats(rng, n * k, -b, b));
}

models::DecoderLayerWeights random_layer(const models::ModelConfig& c, std::mt19937& rng) {
  models::DecoderLayerWeights l;
  const int64_t h = c.hidden_size, q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  l.attn_norm = random_floats(rng, h, 0.8f, 1.2f);
  l.mlp_norm = random_floats(rng, h, 0.8f, 1.2f);
  if (models::is_moe_layer(c, 0)) {
    l.moe.experts.resize(c.moe.n_experts);
    l.moe.router = random_floats(rng, c.moe.n_experts * h, -0.5f, 0.5f);
    if (c.moe.shared_intermediate > 0) l.moe.shared_gate = random_floats(rng, h, -0.3f, 0.3f);
  }
  for (const models::LayerLinear& ll : models::layer_linears(c, 0)) {
    *models::linear_slot(l, ll).weight = random_weight(rng, ll.out, ll.in);
  }
  if (c.qkv_bias) {
    l.attn.bq = random_floats(rng, q, -0.3f, 0.3f);
    l.attn.bk = random_floats(rng, kv, -0.3f, 0.3f);
    l.attn.bv = random_floats(rng, kv, -0.3f, 0.3f);
  }
  if (c.qk_norm) {
    l.attn.q_norm = random_floats(rng, c.head_dim, 0.8f, 1.2f);
    l.attn.k_norm = random_floats(rng, c.head_dim, 0.8f, 1.2f);
  }
  return l;
}

// The engine's own decoder layer (models::decoder_layer, what Model::forward runs per layer)
// on one sequence at positions 0..n-1.
std::vector<float> engine_layer(const models::ModelConfig& c, const models::DecoderLayerWeights& l,
                                const std::vector<float>& x_in, int64_t n, ThreadPool& pool) {
  const int64_t block_size = 16, n_blocks = (n + block_size - 1) / block_size;
  std::vector<float> kc(n_blocks * block_size * c.n_kv_heads * c.head_dim), vc(kc.size());
  const ops::PagedKvLayer cache{DType::kF32, kc.data(),    vc.data(), n_blocks,
                                block_size,  c.n_kv_heads, c.head_dim};
  std::vector<int32_t> table(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) table[b] = static_cast<int32_t>(b);
  const ops::AttentionSeq seqs[] = {{0, n, 0, table}};
  std::vector<int32_t> positions(n);
  for (int64_t t = 0; t < n; ++t) positions[t] = static_cast<int32_t>(t);
  std::vector<float> cos, sin;
  models::rope_tables(models::rope_inv_freq(c), positions, &cos, &sin);
  std::vector<float> x = x_in;
  models::BlockScratch scratch;
  EXPECT_TRUE(
      models::decoder_layer(c, l, x.data(), n, cos.data(), sin.data(), cache, seqs, scratch, pool)
          .ok());
  return x;
}

// calib->targets = the full-precision block's output on calib->inputs, kept in *y.
void set_fp_targets(const BlockTensors<float>& block, BlockCalibration* calib,
                    std::vector<float>* y, ThreadPool& pool) {
  y->resize(calib->n_samples * calib->seqlen * block.hidden);
  ASSERT_TRUE(block_output(block, block.per_linear<const formats::QuantizedWeight*>(nullptr),
                           *calib, y->data(), pool)
                  .ok());
  calib->targets = y->data();
}

class QuantBlockModel : public ::testing::TestWithParam<models::Family> {};

TEST_P(QuantBlockModel, ForwardMatchesEngineLayer) {
  const models::ModelConfig c = config_for(GetParam());
  std::mt19937 rng(9);
  const models::DecoderLayerWeights layer = random_layer(c, rng);
  auto block = copy_block(layer, c, 0);
  ASSERT_TRUE(block.ok()) << block.status().message();
  ThreadPool pool(2);
  const int64_t n = 37;  // crosses KV blocks and the llama3 original context of 16
  const std::vector<float> x = random_floats(rng, n * c.hidden_size, -2.0f, 2.0f);
  const std::vector<float> want = engine_layer(c, layer, x, n, pool);
  PerLinear<const float*> w(block->n_linears());
  for (int i = 0; i < block->n_linears(); ++i) w[i] = block->w[i].data();
  std::vector<float> got(want.size());
  block_forward<float>(*block, w, x.data(), 1, n, nullptr, nullptr, got.data(), pool);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "at " << i;
}

// With bf16 products (the tool's amp) the block stays near the engine's f32 layer, as far as
// bf16's 8-bit significands allow, and is not the f32 computation (the setting reaches the
// products).
TEST_P(QuantBlockModel, Bf16ProductsStayNearEngineLayer) {
  const models::ModelConfig c = config_for(GetParam());
  std::mt19937 rng(9);
  const models::DecoderLayerWeights layer = random_layer(c, rng);
  auto block = copy_block(layer, c, 0);
  ASSERT_TRUE(block.ok()) << block.status().message();
  block->products = ops::Products::kBf16;
  ThreadPool pool(2);
  const int64_t n = 37;
  const std::vector<float> x = random_floats(rng, n * c.hidden_size, -2.0f, 2.0f);
  const std::vector<float> want = engine_layer(c, layer, x, n, pool);
  PerLinear<const float*> w(block->n_linears());
  for (int i = 0; i < block->n_linears(); ++i) w[i] = block->w[i].data();
  std::vector<float> got(want.size());
  block_forward<float>(*block, w, x.data(), 1, n, nullptr, nullptr, got.data(), pool);
  double err = 0, ref = 0, max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
    max_diff = std::max(max_diff, std::abs(d));
  }
  EXPECT_LT(std::sqrt(err / ref), 1e-2);
  EXPECT_GT(max_diff, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, QuantBlockModel,
                         ::testing::Values(models::Family::kLlama, models::Family::kQwen2,
                                           models::Family::kQwen3, models::Family::kQwen3Moe,
                                           models::Family::kQwen2Moe, models::Family::kMixtral));

TEST(QuantBlockModelCopy, RejectsMisshapenWeights) {
  const models::ModelConfig c = config_for(models::Family::kLlama);
  std::mt19937 rng(10);
  models::DecoderLayerWeights layer = random_layer(c, rng);
  layer.mlp.up = random_weight(rng, c.intermediate_size + 1, c.hidden_size);
  auto block = copy_block(layer, c, 3);
  ASSERT_FALSE(block.ok());
  EXPECT_NE(block.status().message().find("model.layers.3.mlp.up_proj"), std::string::npos)
      << block.status().message();
}

// The loaded-layer overload of tune_block copies the layer and tunes it; its errors name the
// layer.
TEST(QuantBlockModelCopy, TuneBlockOnLoadedLayer) {
  const models::ModelConfig c = config_for(models::Family::kQwen3);
  std::mt19937 rng(12);
  models::DecoderLayerWeights layer = random_layer(c, rng);
  ThreadPool pool(1);
  const int64_t n_samples = 2, seqlen = 6;
  const std::vector<float> x = random_floats(rng, n_samples * seqlen * c.hidden_size, -1, 1);
  std::vector<float> y(x.size());
  auto block = copy_block(layer, c, 0);
  ASSERT_TRUE(block.ok());
  BlockCalibration calib{x.data(), nullptr, nullptr, nullptr, n_samples, seqlen};
  set_fp_targets(*block, &calib, &y, pool);
  const auto schemes = block->per_linear(formats::QuantScheme{formats::Layout::kGptq, 4, 16, true});
  TuneOptions opt;
  opt.iters = 3;
  auto r = tune_block(layer, c, 0, schemes, calib, opt, pool);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->initial_loss, 0.0);
  EXPECT_LE(r->best_loss, r->initial_loss);
  for (const auto& w : r->weights) ASSERT_TRUE(w.has_value());
  layer.attn.wk = random_weight(rng, 3, c.hidden_size);
  auto bad = tune_block(layer, c, 7, schemes, calib, opt, pool);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.layers.7.self_attn.k_proj"), std::string::npos)
      << bad.status().message();
}

// An MoE block tunes every expert: the loss drops below RTN's, every linear comes back
// quantized, and an expert no calibration token reaches is reported (and left at RTN).
TEST(QuantBlockModelCopy, TuneMoeBlockReportsUnroutedExperts) {
  models::ModelConfig c = config_for(models::Family::kQwen3Moe);
  std::mt19937 rng(13);
  models::DecoderLayerWeights layer = random_layer(c, rng);
  // No token picks expert 5: with o_proj zero the MLP sees norm(x) of a positive x, which is
  // positive, and expert 5's router row is -1 everywhere, far below the others' logits.
  const int64_t q_dim = c.n_heads * c.head_dim;
  layer.attn.wo = Tensor::from_f32(DType::kF32, {c.hidden_size, q_dim},
                                   std::vector<float>(c.hidden_size * q_dim, 0.0f));
  for (int64_t j = 0; j < c.hidden_size; ++j) layer.moe.router[5 * c.hidden_size + j] = -1.0f;
  ThreadPool pool(2);
  const int64_t n_samples = 4, seqlen = 8;
  const std::vector<float> x = random_floats(rng, n_samples * seqlen * c.hidden_size, 0.1f, 1);
  auto block = copy_block(layer, c, 0);
  ASSERT_TRUE(block.ok()) << block.status().message();
  ASSERT_EQ(block->n_linears(), 4 + 3 * 8);
  std::vector<float> y(x.size());
  BlockCalibration calib{x.data(), nullptr, nullptr, nullptr, n_samples, seqlen};
  set_fp_targets(*block, &calib, &y, pool);
  const auto schemes = block->per_linear(formats::QuantScheme{formats::Layout::kGptq, 4, 16, true});
  TuneOptions opt;
  opt.iters = 20;
  opt.batch_size = 2;
  auto r = tune_block(*block, schemes, calib, opt, pool);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_LT(r->best_loss, r->initial_loss);
  for (const auto& w : r->weights) ASSERT_TRUE(w.has_value());
  // The experts the whole calibration set chooses (every sample is drawn within 20 steps).
  BlockActivations<float> act;
  PerLinear<const float*> w(block->n_linears());
  for (int i = 0; i < block->n_linears(); ++i) w[i] = block->w[i].data();
  block_forward<float>(*block, w, x.data(), n_samples, seqlen, nullptr, &act, y.data(), pool);
  std::vector<int> want;
  for (int64_t e = 0; e < c.moe.n_experts; ++e) {
    if (act.expert_first[e + 1] > act.expert_first[e]) continue;
    for (int which : {kMlpGate, kMlpUp, kMlpDown}) want.push_back(mlp_linear(e, which));
  }
  EXPECT_EQ(r->unrouted, want);
  EXPECT_NE(std::find(want.begin(), want.end(), mlp_linear(5, kMlpGate)), want.end());
  EXPECT_LT(want.size(), 3u * c.moe.n_experts);
}

}  // namespace
}  // namespace qs::quant
