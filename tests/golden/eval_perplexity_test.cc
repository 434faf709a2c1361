// golden: the eval layer on the shipped stories260K. A model against itself (loaded twice)
// has KL exactly 0 and full agreement; its perplexity equals exp of the mean NLL this test
// computes on its own from whole-window forwards; a perturbed copy diverges (KL > 0). The
// KL and NLL formulas are checked on hand-computed distributions, and the CLI on bad input.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "eval/eval_run.h"
#include "eval/perplexity.h"
#include "io/checkpoint.h"
#include "io/text_dataset.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";
const std::string kText = std::string(QS_SOURCE_DIR) + "/data/eval/tinystories-valid.txt.1000";

std::vector<int32_t> story_tokens(const std::string& model_dir) {
  auto tokenizer = tok::load_tokenizer(model_dir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  auto docs = io::read_text_documents(kText);
  EXPECT_TRUE(docs.ok()) << docs.status().to_string();
  if (!tokenizer.ok() || !docs.ok()) return {};
  return (*tokenizer)->encode(io::join_documents(*docs, "\n\n"), true);
}

std::unique_ptr<models::Model> load(const std::string& dir) {
  auto m = models::Model::load(dir);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(EvalFormulas, NllAndKlOnHandComputedDistributions) {
  // softmax([0, ln 2]) = [1/3, 2/3]; softmax([0, 0]) = [1/2, 1/2].
  const float a[2] = {0.0f, static_cast<float>(std::log(2.0))};
  const float b[2] = {0.0f, 0.0f};
  EXPECT_NEAR(eval::token_nll(a, 2, 0), std::log(3.0), 1e-7);
  EXPECT_NEAR(eval::token_nll(a, 2, 1), std::log(1.5), 1e-7);
  const double kl = (1.0 / 3) * std::log((1.0 / 3) / 0.5) + (2.0 / 3) * std::log((2.0 / 3) / 0.5);
  EXPECT_NEAR(eval::kl_divergence(a, b, 2), kl, 1e-7);
  EXPECT_NEAR(eval::kl_divergence(b, a, 2), 0.5 * std::log(1.5) + 0.5 * std::log(0.75), 1e-7);
  EXPECT_EQ(eval::kl_divergence(a, a, 2), 0.0);
  // Large logits must not overflow the softmax.
  const float big[3] = {1000.0f, 999.0f, -1000.0f};
  EXPECT_NEAR(eval::token_nll(big, 3, 0), std::log(1.0 + std::exp(-1.0)), 1e-6);
}

TEST(EvalPerplexity, SelfReferenceIsExactlyZeroAndPplMatchesIndependentNll) {
  auto model = load(kModelDir);
  auto again = load(kModelDir);
  ASSERT_TRUE(model && again);
  const std::vector<int32_t> tokens = story_tokens(kModelDir);
  ASSERT_GT(tokens.size(), 400u);
  EXPECT_EQ(tokens[0], 1);  // the tokenizer's BOS, once at the start

  eval::EvalOptions options;
  options.seqlen = 96;
  options.max_tokens = 400;  // 4 windows; the tail of 16 tokens is dropped
  options.chunk_tokens = 96;
  ThreadPool pool(2);
  auto r = eval::evaluate(*model, again.get(), tokens, options, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->n_windows, 4);
  EXPECT_EQ(r->n_scored, 4 * 95);
  EXPECT_EQ(r->kl_mean, 0.0);
  EXPECT_EQ(r->kl_p99, 0.0);
  EXPECT_EQ(r->kl_max, 0.0);
  EXPECT_EQ(r->top1_agreement, 1.0);
  EXPECT_EQ(r->max_abs_logit_error, 0.0);
  EXPECT_EQ(r->ppl, r->ref_ppl);

  // The NLL computed here, independently: one forward per window, log-softmax in long double.
  const models::ModelConfig& cfg = model->config();
  engine::KvCacheConfig kv_cfg{cfg.n_layers, cfg.n_kv_heads, cfg.head_dim, 8, 16};
  engine::KvCache kv(kv_cfg);
  long double nll = 0;
  int64_t n = 0;
  for (int64_t w = 0; w < 4; ++w) {
    kv.release(0);
    ASSERT_TRUE(kv.reserve(0, 96).ok());
    models::ForwardBatch batch;
    batch.token_ids.assign(tokens.begin() + w * 96, tokens.begin() + (w + 1) * 96);
    batch.seqs = {ops::AttentionSeq{0, 96, 0, kv.block_table(0)}};
    batch.all_logits = true;
    std::vector<float> logits;
    ASSERT_TRUE(model->forward(batch, kv.layers(), pool, &logits).ok());
    for (int64_t i = 0; i + 1 < 96; ++i) {
      const float* row = logits.data() + i * cfg.vocab_size;
      long double z = 0;
      for (int64_t v = 0; v < cfg.vocab_size; ++v) z += std::exp(static_cast<long double>(row[v]));
      nll += std::log(z) - row[batch.token_ids[i + 1]];
      ++n;
    }
  }
  EXPECT_NEAR(r->ppl, std::exp(static_cast<double>(nll / n)), 1e-9 * r->ppl);
  EXPECT_GT(r->ppl, 1.0);
  EXPECT_LT(r->ppl, 100.0);  // stories260K on TinyStories text is far better than chance (512)

  // Chunked windows (prefill in pieces through the KV cache) give the same numbers.
  options.chunk_tokens = 40;
  auto chunked = eval::evaluate(*model, nullptr, tokens, options, pool);
  ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
  EXPECT_FALSE(chunked->has_reference);
  EXPECT_NEAR(chunked->ppl, r->ppl, 1e-5 * r->ppl);
}

TEST(EvalPerplexity, PerturbedModelDiverges) {
  const fs::path dir =
      fs::temp_directory_path() / ("qs_eval_perturbed_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kModelDir)) {
    if (e.path().filename() != "model.safetensors") fs::copy(e.path(), dir / e.path().filename());
  }
  auto ckpt = io::Checkpoint::open(kModelDir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (const std::string& name : ckpt->names()) {
    Tensor t = *ckpt->get(name);
    if (name == "model.layers.2.mlp.down_proj.weight") {
      std::vector<float> v = t.to_f32();
      for (float& x : v) x += noise(rng);
      t = Tensor::from_f32(t.dtype, t.shape, v);
    }
    tensors.emplace_back(name, t);
  }
  ASSERT_TRUE(io::write_checkpoint(dir.string(), tensors).ok());

  auto model = load(dir.string());
  auto reference = load(kModelDir);
  ASSERT_TRUE(model && reference);
  eval::EvalOptions options;
  options.seqlen = 128;
  options.max_tokens = 512;
  ThreadPool pool(2);
  auto r = eval::evaluate(*model, reference.get(), story_tokens(kModelDir), options, pool);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->kl_mean, 0.0);
  EXPECT_GE(r->kl_p99, r->kl_mean);
  EXPECT_GE(r->kl_max, r->kl_p99);
  EXPECT_GT(r->max_abs_logit_error, 0.0);
  EXPECT_LE(r->top1_agreement, 1.0);
  EXPECT_NE(r->ppl, r->ref_ppl);
  fs::remove_all(dir);
}

TEST(EvalPerplexity, TooFewTokensAndBadSeqlenAreErrors) {
  auto model = load(kModelDir);
  ASSERT_TRUE(model);
  ThreadPool pool(1);
  eval::EvalOptions options;
  options.seqlen = 64;
  auto r = eval::evaluate(*model, nullptr, std::vector<int32_t>(63, 5), options, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer than one window of seqlen 64"), std::string::npos);
  options.seqlen = 4096;
  r = eval::evaluate(*model, nullptr, std::vector<int32_t>(5000, 5), options, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_position_embeddings 512"), std::string::npos);
  options.seqlen = 8;
  r = eval::evaluate(*model, nullptr, std::vector<int32_t>(8, 9999), options, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos);
}

std::string run_cli(const std::string& args, int* code) {
  const std::string cmd = std::string(QS_BINARY) + " eval " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe && (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *code = pipe ? WEXITSTATUS(pclose(pipe)) : -1;
  return out;
}

TEST(EvalCli, JsonReportAndBadDatasets) {
  int code = 0;
  std::string out = run_cli("--model " + kModelDir + " --reference " + kModelDir + " --dataset " +
                                kText + " --seqlen 64 --max-tokens 256 --threads 1 --json -",
                            &code);
  ASSERT_EQ(code, 0) << out;
  const size_t brace = out.find("{\n");
  ASSERT_NE(brace, std::string::npos) << out;
  auto j = nlohmann::json::parse(out.substr(brace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["windows"], 4);
  EXPECT_EQ(j["kl_mean"], 0.0);
  EXPECT_EQ(j["top1_agreement"], 1.0);

  const fs::path empty =
      fs::temp_directory_path() / ("qs_eval_empty_" + std::to_string(getpid()) + ".txt");
  std::fclose(std::fopen(empty.c_str(), "w"));
  out = run_cli("--model " + kModelDir + " --dataset " + empty.string(), &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("holds no text"), std::string::npos) << out;
  fs::remove(empty);
  out = run_cli("--model " + kModelDir + " --dataset /nonexistent/x.txt", &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("/nonexistent/x.txt"), std::string::npos) << out;
  out = run_cli("--dataset " + kText, &code);
  EXPECT_EQ(code, 2) << out;
}

}  // namespace
}  // namespace qs
