// golden: tiny random-init Hugging Face checkpoints of every family (tests/golden/fixtures/hf,
// made by scripts/golden/gen_hf_fixtures.py with transformers) against their reference.json:
// the logits of every prompt token, then 12 greedy decode steps whose tokens must match
// exactly and whose logits must match to 1e-4 relative; for the MoE families also the router's
// top-k experts of every token. Decoding goes through the same batched paged forward as
// serving, one token per step.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "../common/golden_fixtures.h"
#include "core/json.h"
#include "engine/kv_cache.h"
#include "io/checkpoint.h"
#include "models/model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::argmax;
using testing::read_floats;

const fs::path kFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/hf";

// |a - b| <= 1e-4 * max(|b|, 1): relative for logits of ordinary size, absolute near 0.
void expect_logits_close(const float* got, const std::vector<float>& want, int64_t row,
                         int64_t vocab, const std::string& what) {
  int64_t bad = 0;
  for (int64_t j = 0; j < vocab; ++j) {
    const float w = want[row * vocab + j];
    if (std::fabs(got[j] - w) > 1e-4f * std::max(1.0f, std::fabs(w))) {
      if (bad++ < 3) ADD_FAILURE() << what << " vocab " << j << ": got " << got[j] << " want " << w;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// want: [moe_layer][token][k] from transformers' router over prompt + greedy tokens; got: the
// engine's choices from the prefill ([moe_layer][n][k]) and from each decode step
// ([moe_layer][1][k]).
void expect_routes_equal(const nlohmann::json& want, const std::vector<int32_t>& prefill,
                         const std::vector<std::vector<int32_t>>& steps, int64_t k,
                         const std::string& what) {
  const int64_t n_layers = static_cast<int64_t>(want.size());
  ASSERT_GT(n_layers, 0) << what;
  const int64_t n = static_cast<int64_t>(prefill.size()) / (n_layers * k);
  ASSERT_EQ(static_cast<int64_t>(prefill.size()), n_layers * n * k) << what;
  int64_t checked = 0;
  for (int64_t l = 0; l < n_layers; ++l) {
    ASSERT_EQ(static_cast<int64_t>(want[l].size()), n + static_cast<int64_t>(steps.size())) << what;
    for (int64_t t = 0; t < static_cast<int64_t>(want[l].size()); ++t) {
      const auto expected = want[l][t].get<std::vector<int32_t>>();
      ASSERT_EQ(static_cast<int64_t>(expected.size()), k) << what;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t got = t < n ? prefill[(l * n + t) * k + j] : steps[t - n].at(l * k + j);
        EXPECT_EQ(got, expected[j])
            << what << " MoE layer " << l << " token " << t << " slot " << j;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, n_layers * (n + static_cast<int64_t>(steps.size())) * k) << what;
}

class HfLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(HfLogits, PromptAndGreedyLogitsMatchTransformers) {
  const fs::path dir = kFixtures / GetParam();
  auto ref = read_json((dir / "reference.json").string());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto model = models::Model::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const models::ModelConfig& c = (*model)->config();
  const int64_t vocab = c.vocab_size;
  const fs::path logits_file = dir / (*ref)["logits_file"].get<std::string>();
  ThreadPool pool(1);

  int prompt_index = 0;
  for (const auto& p : (*ref)["prompts"]) {
    const std::string what = GetParam() + " prompt " + std::to_string(prompt_index++);
    const auto ids = p["input_ids"].get<std::vector<int32_t>>();
    const auto steps = p["greedy_new_tokens"].get<std::vector<int32_t>>();
    const int64_t n = static_cast<int64_t>(ids.size());
    engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim,
                           (n + static_cast<int64_t>(steps.size()) + 15) / 16, 16});
    ASSERT_TRUE(cache.reserve(0, n + static_cast<int64_t>(steps.size())).ok());

    models::ForwardBatch prefill;
    prefill.token_ids = ids;
    prefill.seqs = {{0, n, 0, cache.block_table(0)}};
    prefill.all_logits = true;
    // MoE: the experts chosen for each token, prefill then decode steps, [layer][token][k].
    std::vector<int32_t> prefill_routes;
    std::vector<std::vector<int32_t>> step_routes(steps.size());
    prefill.routes = &prefill_routes;
    std::vector<float> logits;
    ASSERT_TRUE((*model)->forward(prefill, cache.layers(), pool, &logits).ok());
    const auto& pl = p["prompt_logits"];
    ASSERT_EQ(pl["shape"][0].get<int64_t>(), n);
    ASSERT_EQ(pl["shape"][1].get<int64_t>(), vocab);
    const auto want_prompt = read_floats(logits_file, pl["offset_bytes"].get<int64_t>(), n * vocab);
    for (int64_t t = 0; t < n; ++t) {
      expect_logits_close(logits.data() + t * vocab, want_prompt, t, vocab,
                          what + " token " + std::to_string(t));
    }

    const auto& gl = p["greedy_logits"];
    const int64_t n_steps = gl["shape"][0].get<int64_t>();
    ASSERT_EQ(n_steps, static_cast<int64_t>(steps.size()));
    const auto want_steps =
        read_floats(logits_file, gl["offset_bytes"].get<int64_t>(), n_steps * vocab);
    // Step 0 is the last prompt token's logits; each later step feeds the previous token.
    std::vector<float> step_logits(logits.end() - vocab, logits.end());
    for (int64_t s = 0; s < n_steps; ++s) {
      const std::string at = what + " greedy step " + std::to_string(s);
      expect_logits_close(step_logits.data(), want_steps, s, vocab, at);
      ASSERT_EQ(argmax(step_logits.data(), vocab), steps[s]) << at;
      models::ForwardBatch decode;
      decode.token_ids = {steps[s]};
      decode.seqs = {{0, 1, n + s, cache.block_table(0)}};
      decode.routes = &step_routes[s];
      ASSERT_TRUE((*model)->forward(decode, cache.layers(), pool, &step_logits).ok()) << at;
    }
    if (p.contains("router_top_k")) {
      expect_routes_equal(p["router_top_k"], prefill_routes, step_routes, c.moe.top_k, what);
    } else {
      EXPECT_TRUE(prefill_routes.empty()) << what;
    }
  }
}

std::vector<std::string> fixture_names() {
  return testing::fixture_names(kFixtures);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfLogits, ::testing::ValuesIn(fixture_names()),
                         [](const auto& param_info) { return param_info.param; });

// The fixture set must not silently vanish (an empty parameter list would pass).
TEST(HfLogitsFixtures, EveryFamilyHasAFixture) {
  std::set<std::string> architectures;
  for (const auto& name : fixture_names()) {
    auto config = read_json((kFixtures / name / "config.json").string());
    ASSERT_TRUE(config.ok());
    architectures.insert((*config)["architectures"][0].get<std::string>());
  }
  for (const char* a :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
        "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"}) {
    EXPECT_TRUE(architectures.count(a)) << a;
  }
}

}  // namespace
}  // namespace qs
