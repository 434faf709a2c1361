// golden: --lm-head-dtype int8 (models/lm_head_int8.h). The per-row rounding is exact on
// hand-made rows; on the tiny Hugging Face fixtures (tied and untied, f32, bf16 and f16) every
// logit of the int8 head stays within what int8 rounding of the head and of its input can
// move it; stories260K decodes the same greedy tokens; a bad value is an error naming the
// allowed ones; a head stored quantized is left as it is; inspect shows the int8 kernel.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/engine_runner.h"
#include "../common/prompt_logits.h"
#include "core/dtype.h"
#include "models/lm_head_int8.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

const fs::path kHf = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/hf";
const std::string kStories = std::string(QS_SOURCE_DIR) + "/models/stories260K";

models::LoadOptions int8_head() {
  models::LoadOptions o;
  o.lm_head_dtype = "int8";
  return o;
}

std::unique_ptr<models::Model> load(const std::string& dir, const models::LoadOptions& o = {}) {
  auto m = models::Model::load(dir, o);
  EXPECT_TRUE(m.ok()) << dir << ": " << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

Tensor bf16_matrix(const std::vector<std::vector<float>>& rows) {
  const auto n = static_cast<int64_t>(rows.size());
  const auto k = static_cast<int64_t>(rows[0].size());
  Tensor t = Tensor::zeros(DType::kBF16, {n, k});
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) t.mutable_ptr<uint16_t>()[r * k + j] = f32_to_bf16(rows[r][j]);
  }
  return t;
}

TEST(LmHeadInt8, RoundsEachRowHalfToEvenOnItsOwnScale) {
  // Every value is exact in bf16; scale 1 and 2 make the ties land on .5.
  const Tensor w = bf16_matrix({{127.0f, 2.5f, -3.5f, 0.5f},
                                {0.0f, 0.0f, 0.0f, 0.0f},
                                {-254.0f, 5.0f, 3.0f, 1.0f},
                                {1.0f, -0.25f, 0.75f, 0.0f}});
  ThreadPool pool(2);
  const formats::QuantizedWeight q = models::quantize_int8_rows(w, pool).value();
  ASSERT_TRUE(q.validate().ok()) << q.validate().to_string();
  EXPECT_EQ(q.bits, 8);
  EXPECT_EQ(q.group_size, 4);
  EXPECT_EQ(q.scales, (std::vector<float>{1.0f, 0.0f, 2.0f, 1.0f / 127.0f}));
  EXPECT_EQ(q.zeros, (std::vector<int32_t>(4, 128)));
  const std::vector<int> want = {127, 2, -4, 0, 0, 0, 0, 0, -127, 2, 2, 0, 127, -32, 95, 0};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(static_cast<int>(q.codes[i]) - 128, want[i]) << "element " << i;
  }
}

TEST(LmHeadInt8, NonFiniteWeightIsAnErrorNamingItsRow) {
  ThreadPool pool(1);
  for (float bad : {NAN, INFINITY}) {
    const auto q = models::quantize_int8_rows(bf16_matrix({{1, 2}, {3, bad}, {5, 6}}), pool);
    ASSERT_FALSE(q.ok());
    EXPECT_NE(q.status().message().find("row 1 "), std::string::npos) << q.status().message();
  }
}

// The head of `auto_model` as the int8 copy holds it: per row its scale s, the L1 norm and
// the largest magnitude of the dequantized row.
struct RowStats {
  std::vector<float> scale, l1, amax;
};

RowStats row_stats(const models::Model& auto_model) {
  ThreadPool pool(2);
  const formats::QuantizedWeight q =
      models::quantize_int8_rows(auto_model.lm_head().dense, pool).value();
  RowStats s;
  for (int64_t r = 0; r < q.n; ++r) {
    float l1 = 0.0f;
    int amax = 0;
    for (int64_t j = 0; j < q.k; ++j) {
      const int c = std::abs(static_cast<int>(q.codes[r * q.k + j]) - 128);
      l1 += static_cast<float>(c);
      amax = std::max(amax, c);
    }
    s.scale.push_back(q.scales[r]);
    s.l1.push_back(q.scales[r] * l1);
    s.amax.push_back(q.scales[r] * static_cast<float>(amax));
  }
  return s;
}

// The input h of lm_head is the final RMSNorm's output g * u with |u|_2 <= sqrt(k), so
// |h|_1 <= |g|_2 sqrt(k) and |h|_inf <= max|g| sqrt(k) (Cauchy-Schwarz). A logit of the int8
// head then moves from the 16-bit one by at most
//   s/2 |h|_1                    (each weight rounded to its row's grid s)
// + |h|_inf / 254 |w_row|_1      (x rounded to int8 per 32-block: half a step of amax / 127)
// + 2^-8 |h|_1 max|w_row|        (or to bf16, under QS_ACTIVATION_PRECISION=bf16)
// and f32 summation slack.
TEST(LmHeadInt8, LogitsWithinTheRoundingBound) {
  const std::vector<int32_t> ids = {1, 7, 42, 100, 3, 250, 17, 64, 9, 128, 5, 77};
  for (const std::string name :
       {"llama_tied", "qwen2_tied", "llama_gqa_untied", "llama_bf16", "qwen2_f16"}) {
    SCOPED_TRACE(name);
    const std::string dir = (kHf / name).string();
    auto a = load(dir);
    auto b = load(dir, int8_head());
    ASSERT_TRUE(a && b);
    ASSERT_NE(b->lm_head().quant, nullptr);
    EXPECT_EQ(a->lm_head().quant, nullptr);
    EXPECT_NE(b->lm_head().kernel().find("int8 per-channel"), std::string::npos)
        << b->lm_head().kernel();
    EXPECT_LT(b->lm_head().resident_bytes(), a->lm_head().resident_bytes());
    // The embedding lookups are untouched.
    const int64_t k = a->config().hidden_size;
    std::vector<float> ea(ids.size() * k), eb(ids.size() * k);
    ASSERT_TRUE(a->embed(ids, ea.data()).ok());
    ASSERT_TRUE(b->embed(ids, eb.data()).ok());
    EXPECT_EQ(ea, eb);

    const RowStats st = row_stats(*a);
    double g2 = 0, gmax = 0;
    for (float g : a->final_norm()) {
      g2 += static_cast<double>(g) * g;
      gmax = std::max(gmax, static_cast<double>(std::fabs(g)));
    }
    const double h1 = std::sqrt(g2) * std::sqrt(static_cast<double>(k));
    const double hinf = gmax * std::sqrt(static_cast<double>(k));
    const std::vector<float> la = testing::prompt_logits(*a, ids);
    const std::vector<float> lb = testing::prompt_logits(*b, ids);
    ASSERT_EQ(la.size(), lb.size());
    const int64_t vocab = a->config().vocab_size;
    double worst = 0, moved = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      const size_t r = i % static_cast<size_t>(vocab);
      const double bound = st.scale[r] / 2 * h1 + hinf / 254 * st.l1[r] +
                           std::ldexp(h1 * st.amax[r], -8) + 1e-4 * (1 + std::fabs(la[i]));
      const double d = std::fabs(static_cast<double>(lb[i]) - la[i]);
      moved = std::max(moved, d);
      worst = std::max(worst, d / bound);
      if (d > bound) {
        ADD_FAILURE() << "logit " << i << ": 16-bit " << la[i] << ", int8 " << lb[i] << ", bound "
                      << bound;
        break;
      }
    }
    EXPECT_GT(moved, 0.0) << "the int8 head gave the 16-bit logits exactly: was it applied?";
    std::printf("%s: max |logit change| %.3g, at most %.2f of its bound\n", name.c_str(), moved,
                worst);
  }
}

std::vector<int32_t> greedy(const models::Model& model, const tok::Tokenizer& tokenizer,
                            const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(1);
  auto engine = testing::make_engine(model, &tokenizer, {2}, pool, 512);
  if (!engine) return {};
  EXPECT_TRUE(engine->add_request(testing::greedy_request("a", prompt, n)).ok());
  return testing::run_to_completion(*engine)["a"].ids;
}

TEST(LmHeadInt8, Stories260KGreedyTokensUnchanged) {
  auto a = load(kStories);
  auto b = load(kStories, int8_head());
  auto tokenizer = tok::load_tokenizer(kStories);
  ASSERT_TRUE(a && b && tokenizer.ok());
  for (const std::string prompt : {"", "Once upon a time", "Lily and Ben went to the park"}) {
    const std::vector<int32_t> ids = (*tokenizer)->encode(prompt, /*add_special_tokens=*/true);
    const std::vector<int32_t> want = greedy(*a, **tokenizer, ids, 32);
    EXPECT_EQ(want.size(), 32u);
    EXPECT_EQ(greedy(*b, **tokenizer, ids, 32), want) << "prompt '" << prompt << "'";
  }
}

TEST(LmHeadInt8, BadValueNamesTheAllowedOnes) {
  models::LoadOptions o;
  o.lm_head_dtype = "fp4";
  auto m = models::Model::load(kStories, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("'fp4'"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("auto or int8"), std::string::npos) << m.status().message();
  const testing::CliResult r =
      run_cli("generate --model " + kStories + " --prompt x --max-tokens 1 --lm-head-dtype fp4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("auto or int8"), std::string::npos) << r.output;
}

TEST(LmHeadInt8, InspectShowsTheInt8Kernel) {
  const testing::CliResult r = run_cli("inspect " + kStories + " --lm-head-dtype int8", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("  lm_head ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("int8 per-channel"), std::string::npos) << line;
}

// A head the checkpoint stores quantized (quantize --quant_lm_head) keeps its own scheme and
// gives the same logits with and without the flag.
TEST(LmHeadInt8, QuantizedHeadIsLeftAsStored) {
  const std::string dir = (fs::temp_directory_path() / testing::unique_name("qs_lm_head")).string();
  fs::create_directories(dir);
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", 64},
                                 {"intermediate_size", 128},
                                 {"num_hidden_layers", 1},
                                 {"num_attention_heads", 4},
                                 {"num_key_value_heads", 2},
                                 {"vocab_size", 96},
                                 {"max_position_embeddings", 64},
                                 {"rms_norm_eps", 1e-5},
                                 {"tie_word_embeddings", false},
                                 {"eos_token_id", 2}};
  std::ofstream(dir + "/tiny.json") << config.dump();
  testing::CliResult r = run_cli("make-model --config " + dir + "/tiny.json --dtype bf16 --seed 5" +
                                 " --out " + dir + "/src");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_cli("quantize --model " + dir + "/src --output_dir " + dir +
              "/q --iters 0 --disable_opt_rtn --group_size 32 --quant_lm_head");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto a = load(dir + "/q");
  auto b = load(dir + "/q", int8_head());
  ASSERT_TRUE(a && b);
  ASSERT_NE(b->lm_head().quant, nullptr);
  EXPECT_EQ(b->lm_head().quant->scheme(), a->lm_head().quant->scheme());
  EXPECT_EQ(b->lm_head().quant->scheme().bits, 4);
  EXPECT_EQ(b->lm_head().kernel(), a->lm_head().kernel());
  const std::vector<int32_t> ids = {1, 5, 9, 33, 70};
  EXPECT_EQ(testing::prompt_logits(*a, ids), testing::prompt_logits(*b, ids));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qs
