// End-to-end tests of `quantserve make-model` and `quantserve bench latency` through the built
// binary, on a tiny config: the written checkpoint loads and is reproducible from its seed,
// and the benchmark's JSON has the fields docs/benchmarks.md relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "io/checkpoint.h"
#include "models/model.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::run_cli;
using testing::slurp;

class MakeModelBenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_make_model_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    const nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                                   {"model_type", "qwen2"},
                                   {"hidden_size", 64},
                                   {"intermediate_size", 96},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"vocab_size", 128},
                                   {"max_position_embeddings", 64},
                                   {"rms_norm_eps", 1e-6},
                                   {"rope_theta", 10000.0},
                                   {"tie_word_embeddings", true},
                                   {"eos_token_id", 2}};
    std::ofstream(dir_ + "/tiny.json") << config.dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
};

TEST_F(MakeModelBenchCli, WritesALoadableCheckpointThatItsSeedReproduces) {
  CliResult a = run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 7 --out " +
                        dir_ + "/a");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CliResult b = run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 7 --out " +
                        dir_ + "/b");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  CliResult c = run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 8 --out " +
                        dir_ + "/c");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(slurp(dir_ + "/a/model.safetensors"), slurp(dir_ + "/b/model.safetensors"));
  EXPECT_NE(slurp(dir_ + "/a/model.safetensors"), slurp(dir_ + "/c/model.safetensors"));

  auto model = models::Model::load(dir_ + "/a");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto ckpt = io::Checkpoint::open(dir_ + "/a");
  ASSERT_TRUE(ckpt.ok());
  auto norm = ckpt->get("model.layers.0.input_layernorm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->dtype, DType::kBF16);
  for (float v : norm->to_f32()) EXPECT_EQ(v, 1.0f);  // norms start at one, as HF's init
  auto q = ckpt->get("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  float max_abs = 0;
  for (float v : q->to_f32()) max_abs = std::max(max_abs, std::fabs(v));
  EXPECT_GT(max_abs, 0.01f);
  EXPECT_LT(max_abs, 0.04f);  // uniform with std 0.02: |w| <= 0.02 * sqrt(3)
}

TEST_F(MakeModelBenchCli, BenchLatencyWritesJsonWithTheRoofline) {
  ASSERT_EQ(run_cli("make-model --config " + dir_ + "/tiny.json --out " + dir_ + "/m").exit_code,
            0);
  CliResult r =
      run_cli("bench latency --model " + dir_ + "/m --input-len 8 --output-len 4 --threads 1 " +
              "--repetitions 2 --json " + dir_ + "/out.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| pp8 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| tg4 |"), std::string::npos) << r.output;
  const auto results = nlohmann::json::parse(slurp(dir_ + "/out.json"));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["test"], "pp8");
  EXPECT_EQ(results[1]["test"], "tg4");
  for (const auto& res : results) {
    EXPECT_EQ(res["samples_tokens_per_second"].size(), 2u);
    EXPECT_GT(res["tokens_per_second_mean"].get<double>(), 0.0);
  }
  // The roofline counts what a decode step streams from memory as the model holds it.
  auto model = models::Model::load(dir_ + "/m");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ(results[1]["weight_bytes_per_token"].get<uint64_t>(), (*model)->decode_weight_bytes());
  EXPECT_GT(results[1]["read_bandwidth_gbs_before"].get<double>(), 0.0);
  EXPECT_GT(results[1]["roofline_fraction"].get<double>(), 0.0);
  // A tiny model's weights fit any last-level cache the OS reports: its roofline fraction is
  // flagged rather than taken for a bandwidth figure.
  if (results[1]["last_level_cache_bytes"].get<uint64_t>() > 0) {
    EXPECT_TRUE(results[1]["weights_fit_in_cache"].get<bool>());
    EXPECT_NE(r.output.find("(weights fit in cache)"), std::string::npos) << r.output;
  }
}

TEST_F(MakeModelBenchCli, JsonToStdoutLeavesStdoutPureJson) {
  ASSERT_EQ(run_cli("make-model --config " + dir_ + "/tiny.json --out " + dir_ + "/m").exit_code,
            0);
  const CliResult r = run_cli("bench latency --model " + dir_ +
                                  "/m --input-len 4 --output-len 2 --threads 1 --repetitions 1 " +
                                  "--no-roofline --json -",
                              /*stderr_too=*/false);
  ASSERT_EQ(r.exit_code, 0);
  const auto results = nlohmann::json::parse(r.output);  // throws (fails the test) on a table line
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results[1].contains("roofline_fraction"));  // --no-roofline
}

TEST_F(MakeModelBenchCli, BadInvocationsAreClearErrors) {
  CliResult both = run_cli("make-model --like qwen2.5-0.5b --config " + dir_ + "/tiny.json --out " +
                           dir_ + "/x");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.output.find("exactly one of --like"), std::string::npos) << both.output;
  CliResult unknown = run_cli("make-model --like gpt-5 --out " + dir_ + "/x");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("tinyllama-1.1b"), std::string::npos) << unknown.output;
  CliResult dtype =
      run_cli("make-model --config " + dir_ + "/tiny.json --dtype int3 --out " + dir_ + "/x");
  EXPECT_EQ(dtype.exit_code, 1);
  EXPECT_NE(dtype.output.find("--dtype"), std::string::npos) << dtype.output;

  ASSERT_EQ(run_cli("make-model --config " + dir_ + "/tiny.json --out " + dir_ + "/m").exit_code,
            0);
  CliResult too_long =
      run_cli("bench latency --model " + dir_ + "/m --input-len 100 --output-len 0");
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_NE(too_long.output.find("max_position_embeddings"), std::string::npos) << too_long.output;
  CliResult bad_list = run_cli("bench latency --model " + dir_ + "/m --threads 1,x");
  EXPECT_EQ(bad_list.exit_code, 1);
  EXPECT_NE(bad_list.output.find("--threads"), std::string::npos) << bad_list.output;
  CliResult unknown_bench = run_cli("bench prefill --model " + dir_ + "/m");
  EXPECT_EQ(unknown_bench.exit_code, 2);
  EXPECT_NE(unknown_bench.output.find("unknown benchmark"), std::string::npos);
}

}  // namespace
}  // namespace qs
