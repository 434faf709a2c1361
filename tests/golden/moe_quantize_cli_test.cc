// golden: Mixture-of-Experts checkpoints through the built binary. `make-model --quantize` and
// `quantize` (RTN) pack every expert and leave the routers and the shared-expert gate 16-bit
// (as auto-round does, and as transformers and vLLM expect to load them); the result loads
// with no flag and stays close to the 16-bit model; OPT-RTN searches every routed expert's
// scales (RTN for the unrouted, counted) and beats RTN; experts of one layer with different
// quantizations are refused naming the expert; AutoRound tuning says it does not cover MoE yet.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/prompt_logits.h"
#include "engine/kv_cache.h"
#include "io/checkpoint.h"
#include "models/model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;
using testing::slurp;

const std::string kRtn = " --iters 0 --disable_opt_rtn";

class MoeQuantizeCli : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_moe_quant_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    nlohmann::json config = {{"architectures", {GetParam()}},
                             {"hidden_size", 64},
                             {"intermediate_size", 96},
                             {"num_hidden_layers", 2},
                             {"num_attention_heads", 4},
                             {"num_key_value_heads", 2},
                             {"vocab_size", 96},
                             {"max_position_embeddings", 64},
                             {"rms_norm_eps", 1e-5},
                             {"tie_word_embeddings", false},
                             {"num_experts", 4},
                             {"num_experts_per_tok", 2},
                             {"moe_intermediate_size", 64},
                             {"shared_expert_intermediate_size", 96},
                             {"eos_token_id", 2}};
    std::ofstream(dir_ + "/tiny.json") << config.dump();
    CliResult r =
        run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 3 --out " + src());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string src() const { return dir_ + "/src"; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

using testing::prompt_logits;

// A pre-tokenized calibration file: `samples` lines of `len` ids, id t of sample s being
// (s * a + t * b) % 95 + 1 (inside the tiny vocabulary, never 0).
void write_token_calibration(const std::string& file, int samples, int len, int a, int b) {
  std::ofstream f(file);
  for (int s = 0; s < samples; ++s) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < len; ++t) ids.push_back((s * a + t * b) % 95 + 1);
    f << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
}

// The summary's per-block rows "| i | <RTN loss> | <best loss> | ..." of a tuned run: each best
// well below its RTN loss (random weights at W4 lose 3-5x less after 30 steps here).
void tuned_blocks_improve(const std::string& out, int n_blocks) {
  for (int i = 0; i < n_blocks; ++i) {
    const std::string row = "\n| " + std::to_string(i) + " | ";
    const size_t at = out.find(row);
    ASSERT_NE(at, std::string::npos) << "no row for block " << i << " in\n" << out;
    std::istringstream cells(out.substr(at + row.size()));
    double rtn = 0, best = 0;
    std::string bar;
    cells >> rtn >> bar >> best;
    EXPECT_GT(rtn, 0.0) << "block " << i;
    EXPECT_LT(best, 0.8 * rtn) << "block " << i;
  }
}

// RMS of (a - b) over RMS of b.
double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (a[i] - b[i]) * double(a[i] - b[i]);
    r += b[i] * double(b[i]);
  }
  return std::sqrt(d / r);
}

TEST_P(MoeQuantizeCli, RtnPacksEveryExpertAndKeepsTheRouter16Bit) {
  const std::string out = path("w8");
  CliResult q = run_cli("quantize --model " + src() + " --output_dir " + out + kRtn +
                        " --bits 8 --group_size 32");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  auto ckpt = io::Checkpoint::open(out);
  ASSERT_TRUE(ckpt.ok());
  const bool mixtral = GetParam() == "MixtralForCausalLM";
  const std::string p = mixtral ? "model.layers.1.block_sparse_moe." : "model.layers.1.mlp.";
  EXPECT_TRUE(ckpt->has(p + (mixtral ? "experts.3.w2.qweight" : "experts.3.down_proj.qweight")));
  EXPECT_TRUE(ckpt->has(p + "gate.weight"));
  EXPECT_FALSE(ckpt->has(p + "gate.qweight"));
  if (GetParam() == "Qwen2MoeForCausalLM") {
    EXPECT_TRUE(ckpt->has(p + "shared_expert.up_proj.qweight"));
    EXPECT_TRUE(ckpt->has(p + "shared_expert_gate.weight"));
  }
  auto model = models::Model::load(out);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  int64_t experts = 0;
  for (const auto& l : (*model)->linears()) {
    if (l.name == "lm_head") continue;
    EXPECT_EQ(l.scheme.bits, 8) << l.name;
    experts += l.routed_expert;
  }
  EXPECT_EQ(experts, 2 * 4 * 3);
  const std::vector<int32_t> ids = {1, 17, 33, 5, 60, 61, 9, 90, 4, 4, 12};
  const double err = relative_rms(prompt_logits(out, ids), prompt_logits(src(), ids));
  // int8 g32 RTN of bf16 weights: 0.6-0.9% of the logits' scale here; a broken expert or a
  // misrouted token is tens of percent.
  EXPECT_LT(err, 0.03) << GetParam();
  EXPECT_GT(err, 0.0) << "the quantized model must not be the source itself";
}

TEST_P(MoeQuantizeCli, MakeModelQuantizeMatchesQuantizeRtn) {
  CliResult a = run_cli("make-model --config " + path("tiny.json") +
                        " --dtype bf16 --seed 3 --quantize w4g32 --out " + path("mm"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CliResult b = run_cli("quantize --model " + src() + " --output_dir " + path("q") + kRtn +
                        " --bits 4 --group_size 32");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto ma = io::Checkpoint::open(path("mm"));
  auto mb = io::Checkpoint::open(path("q"));
  ASSERT_TRUE(ma.ok() && mb.ok());
  ASSERT_EQ(ma->names(), mb->names());
  for (const std::string& name : ma->names()) {
    const Tensor ta = *ma->get(name), tb = *mb->get(name);
    ASSERT_EQ(ta.shape, tb.shape) << name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes()), 0) << name;
  }
}

TEST_P(MoeQuantizeCli, ExpertsOfOneLayerMustShareAQuantization) {
  const bool mixtral = GetParam() == "MixtralForCausalLM";
  const std::string expert = mixtral ? "model.layers.0.block_sparse_moe.experts.2.w3"
                                     : "model.layers.0.mlp.experts.2.up_proj";
  CliResult q =
      run_cli("quantize --model " + src() + " --output_dir " + path("mixed") + kRtn +
              " --bits 4 --group_size 32 --layer_config '{\"" + expert + "\": {\"bits\": 8}}'");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  auto model = models::Model::load(path("mixed"));
  ASSERT_FALSE(model.ok());
  const std::string& msg = model.status().message();
  EXPECT_NE(msg.find("expert '" + expert + "' is stored as"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must share one quantization"), std::string::npos) << msg;
}

// OPT-RTN (--iters 0) runs MoE layers through the quantizer's block (quant/block.h): every
// expert a calibration token reaches gets the imatrix-weighted scale search, the others RTN
// (counted in the summary), and the result beats plain RTN on the same weights.
TEST_P(MoeQuantizeCli, OptRtnSearchesEveryRoutedExpert) {
  write_token_calibration(path("calib.jsonl"), 8, 24, 37, 11);
  const std::string common =
      " --bits 4 --group_size 32 --nsamples 8 --seqlen 24 --dataset " + path("calib.jsonl");
  CliResult opt =
      run_cli("quantize --model " + src() + " --output_dir " + path("opt") + " --iters 0" + common);
  ASSERT_EQ(opt.exit_code, 0) << opt.output;
  CliResult rtn =
      run_cli("quantize --model " + src() + " --output_dir " + path("rtn") + kRtn + common);
  ASSERT_EQ(rtn.exit_code, 0) << rtn.output;
  // 8 x 24 tokens x top-2 of 4 experts: every expert is reached in this model.
  EXPECT_EQ(opt.output.find("saw no calibration token"), std::string::npos) << opt.output;
  auto a = io::Checkpoint::open(path("opt"));
  auto b = io::Checkpoint::open(path("rtn"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->names(), b->names());
  int64_t experts_changed = 0, experts = 0;
  for (const std::string& name : a->names()) {
    if (name.find(".experts.") == std::string::npos || !name.ends_with(".scales")) continue;
    const Tensor ta = *a->get(name), tb = *b->get(name);
    ++experts;
    experts_changed += std::memcmp(ta.data, tb.data, ta.nbytes()) != 0;
  }
  EXPECT_EQ(experts, 2 * 4 * 3);
  // The search moves some group's scale off RTN's in nearly every expert linear.
  EXPECT_GE(experts_changed, experts * 3 / 4) << experts_changed << " of " << experts;
  // As close to the 16-bit model as RTN on a prompt of its own (random weights and 192
  // calibration tokens: the two differ by noise, 0.07-0.09 relative RMS here, either way; a
  // wrong imatrix row or expert would be far off).
  const std::vector<int32_t> ids = {1, 17, 33, 5, 60, 61, 9, 90, 4, 4, 12, 40, 41, 3};
  const auto ref = prompt_logits(src(), ids);
  const double e_opt = relative_rms(prompt_logits(path("opt"), ids), ref);
  const double e_rtn = relative_rms(prompt_logits(path("rtn"), ids), ref);
  EXPECT_LT(e_opt, 1.25 * e_rtn) << "OPT-RTN " << e_opt << ", RTN " << e_rtn;
}

TEST_P(MoeQuantizeCli, UnroutedExpertsAreRtnAndCounted) {
  // One sample of 4 tokens reaches at most 8 (token, expert) pairs per layer; with 16 experts
  // some are never chosen.
  auto config = nlohmann::json::parse(slurp(path("tiny.json")));
  config["num_experts"] = 16;
  config["num_local_experts"] = 16;
  std::ofstream(path("wide.json")) << config.dump();
  CliResult made = run_cli("make-model --config " + path("wide.json") +
                           " --dtype bf16 --seed 3 --out " + path("wide"));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::ofstream(path("one.jsonl")) << "{\"input_ids\": [1, 2, 3, 4]}\n";
  CliResult q = run_cli("quantize --model " + path("wide") + " --output_dir " + path("wq") +
                        " --iters 0 --bits 4 --group_size 32 --nsamples 1 --seqlen 4 --dataset " +
                        path("one.jsonl"));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  const size_t at = q.output.find(" expert linears saw no calibration token and were RTN");
  ASSERT_NE(at, std::string::npos) << q.output;
  const size_t line = q.output.rfind('\n', at) + 1;
  const int64_t unrouted = std::stoll(q.output.substr(line, at - line));
  EXPECT_GT(unrouted, 0);
  EXPECT_TRUE(models::Model::load(path("wq")).ok());
  // Exactly those keep RTN's scales; the routed ones' searches move some scale.
  CliResult r = run_cli("quantize --model " + path("wide") + " --output_dir " + path("wr") + kRtn +
                        " --bits 4 --group_size 32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto a = io::Checkpoint::open(path("wq"));
  auto b = io::Checkpoint::open(path("wr"));
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t same = 0;
  for (const std::string& name : a->names()) {
    if (name.find(".experts.") == std::string::npos || !name.ends_with(".scales")) continue;
    const Tensor ta = *a->get(name), tb = *b->get(name);
    same += std::memcmp(ta.data, tb.data, ta.nbytes()) == 0;
  }
  EXPECT_EQ(same, unrouted);
}

TEST_P(MoeQuantizeCli, InspectCountsTheActiveParameters) {
  CliResult text = run_cli("inspect " + src());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("2 of 4 experts per token"), std::string::npos) << text.output;
  CliResult j = run_cli("inspect --json " + src(), /*stderr_too=*/false);
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const auto summary = nlohmann::json::parse(j.output);
  const int64_t all = summary["parameters"], active = summary["active_parameters"];
  // Each of the 2 layers has 4 experts of 3 x 64 x inter parameters (Mixtral's experts take
  // intermediate_size, 96; the Qwen ones moe_intermediate_size, 64); a token runs 2 of them.
  const int64_t inter = GetParam() == "MixtralForCausalLM" ? 96 : 64;
  EXPECT_EQ(all - active, 2 * 2 * 3 * 64 * inter);
}

// AutoRound (--iters > 0) tunes MoE blocks like dense ones (quant/block.h walks the layer's
// experts): every expert and the shared expert come out packed, the router stays 16-bit, and
// each block's best loss is below its RTN loss (iteration 0), which the summary prints.
TEST_P(MoeQuantizeCli, AutoRoundTunesEveryExpert) {
  write_token_calibration(path("calib.jsonl"), 4, 16, 29, 13);
  CliResult q = run_cli("quantize --model " + src() + " --output_dir " + path("t") +
                        " --iters 30 --bits 4 --group_size 32 --nsamples 4 --seqlen 16 " +
                        "--batch_size 4 --dataset " + path("calib.jsonl"));
  ASSERT_EQ(q.exit_code, 0) << q.output;
  auto ckpt = io::Checkpoint::open(path("t"));
  ASSERT_TRUE(ckpt.ok());
  const bool mixtral = GetParam() == "MixtralForCausalLM";
  const std::string p = mixtral ? "model.layers.0.block_sparse_moe." : "model.layers.0.mlp.";
  for (int e = 0; e < 4; ++e) {
    const std::string ex = p + "experts." + std::to_string(e) + ".";
    EXPECT_TRUE(ckpt->has(ex + (mixtral ? "w1.qweight" : "gate_proj.qweight"))) << ex;
    EXPECT_TRUE(ckpt->has(ex + (mixtral ? "w2.qweight" : "down_proj.qweight"))) << ex;
  }
  EXPECT_TRUE(ckpt->has(p + "gate.weight"));
  if (GetParam() == "Qwen2MoeForCausalLM") {
    EXPECT_TRUE(ckpt->has(p + "shared_expert.down_proj.qweight"));
  }
  // The per-block table: "block  rtn_loss  best_loss ..." rows for blocks 0 and 1.
  tuned_blocks_improve(q.output, 2);
  auto model = models::Model::load(path("t"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Families, MoeQuantizeCli,
                         ::testing::Values("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM",
                                           "MixtralForCausalLM"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace qs
