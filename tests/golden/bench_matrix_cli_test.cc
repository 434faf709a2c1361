// golden: `quantserve bench matrix` through the built binary on a tiny make-model checkpoint
// (stories260K's tokenizer beside it): every scheme x KV budget x concurrency cell runs its
// requests against a `serve` child, the JSON has the documented shape, a larger budget holds
// more KV tokens, and bad invocations (an unknown scheme, a budget too small to start, a seed
// that does not reproduce the reference) are clear errors. No timing is asserted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;
using testing::slurp;

const std::string kTokenizerDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";

class BenchMatrixCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_bench_matrix_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Llama shapes that w4g128 packs (every in-feature a multiple of 128), stories260K's
    // vocabulary so its tokenizer fits.
    const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                   {"model_type", "llama"},
                                   {"hidden_size", 128},
                                   {"intermediate_size", 256},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"vocab_size", 512},
                                   {"max_position_embeddings", 256},
                                   {"rms_norm_eps", 1e-5},
                                   {"tie_word_embeddings", true},
                                   {"bos_token_id", 1},
                                   {"eos_token_id", 2}};
    std::ofstream(dir_ + "/tiny.json") << config.dump();
    CliResult r =
        run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 5 --out " + ref());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* f : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"}) {
      fs::copy_file(kTokenizerDir + "/" + f, ref() + "/" + f);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string ref() const { return dir_ + "/ref"; }
  // A small request set, one server thread, no plot: what every run here shares.
  std::string common() const {
    return " --model " + ref() +
           " --num-prompts 6 --random-input-len 16 --random-output-len 8 --threads 1 "
           "--make-model-seed 5 --no-plot";
  }

  std::string dir_;
};

TEST_F(BenchMatrixCli, EveryCellRunsItsRequestsAndTheLargerBudgetHoldsMore) {
  const std::string out = dir_ + "/out";
  CliResult r = run_cli("bench matrix" + common() +
                        " --schemes bf16,w4g128 --kv-cache-memory 128KiB,1MiB --max-concurrency "
                        "1,4 --result-dir " +
                        out + " --label tiny");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| scheme | KV memory | concurrency | output tok/s |"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("CPU: "), std::string::npos) << r.output;

  const auto j = nlohmann::json::parse(slurp(out + "/tiny.json"));
  EXPECT_EQ(j["kind"], "quantserve bench matrix");
  EXPECT_TRUE(j["cpu"].contains("model_name"));
  EXPECT_TRUE(j["cpu"]["flags"].is_array());
  ASSERT_EQ(j["schemes"].size(), 2u);
  EXPECT_EQ(j["schemes"][0]["source"], "reference");
  EXPECT_EQ(j["schemes"][1]["source"], "made");
  EXPECT_NE(j["schemes"][1]["made_by"].get<std::string>().find("make-model"), std::string::npos);
  EXPECT_EQ(j["max_concurrency"], nlohmann::json::array({1, 4}));
  ASSERT_EQ(j["cells"].size(), 2u * 2u * 2u);
  std::map<std::string, std::map<std::string, int64_t>> kv_tokens;  // scheme -> budget -> tokens
  for (const auto& c : j["cells"]) {
    SCOPED_TRACE(c.dump().substr(0, 400));
    ASSERT_EQ(c["status"], "ok");
    EXPECT_TRUE(c["error"].is_null());
    EXPECT_EQ(c["completed"], 6);
    EXPECT_EQ(c["failed"], 0);
    EXPECT_GT(c["output_throughput"].get<double>(), 0.0);
    for (const char* k : {"mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms"}) {
      EXPECT_TRUE(c[k].is_number()) << k;
    }
    EXPECT_GT(c["peak_rss_mib"].get<double>(), 0.0);
    EXPECT_TRUE(c["preemptions"].is_number());
    // The full bench-serve result: every request ran to its 8 tokens (random forces ignore_eos).
    const auto& res = c["result"];
    EXPECT_EQ(res["completed"], 6);
    EXPECT_EQ(res["max_concurrency"], c["max_concurrency"]);
    EXPECT_EQ(res["output_lens"], nlohmann::json::array({8, 8, 8, 8, 8, 8}));
    EXPECT_EQ(res["ttfts"].size(), 6u);
    EXPECT_TRUE(fs::exists(c["server_log"].get<std::string>()));
    kv_tokens[c["scheme"]][c["kv_cache_memory"]] = c["kv_cache_tokens"].get<int64_t>();
  }
  for (const std::string scheme : {"bf16", "w4g128"}) {
    // 2 layers x (K, V) x 2 heads x 32 dims x 4 bytes (the f32 "auto" cache): 1 KiB a token.
    EXPECT_EQ(kv_tokens[scheme]["128KiB"], 128) << scheme;
    EXPECT_EQ(kv_tokens[scheme]["1MiB"], 1024) << scheme;
  }
  EXPECT_FALSE(fs::exists(out + "/models"));  // made checkpoints go unless --keep-models
}

TEST_F(BenchMatrixCli, Fp8KvHoldsMoreTokensInTheSameBudget) {
  const std::string out = dir_ + "/out";
  CliResult r = run_cli("bench matrix" + common() +
                        " --schemes bf16+fp8kv --kv-cache-memory 128KiB --max-concurrency 2 "
                        "--result-dir " +
                        out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(slurp(out + "/matrix.json"));
  ASSERT_EQ(j["cells"].size(), 1u);
  EXPECT_EQ(j["cells"][0]["kv_cache_dtype"], "fp8");
  EXPECT_EQ(j["cells"][0]["kv_cache_tokens"], 128 * 4);  // one byte an element, not four
  EXPECT_EQ(j["cells"][0]["completed"], 6);
}

TEST_F(BenchMatrixCli, AServerThatCannotStartIsACellErrorNotAHang) {
  // 8 KiB hold 8 tokens, fewer than one request of max_model_len: serve refuses to start.
  const std::string out = dir_ + "/out";
  CliResult r = run_cli("bench matrix" + common() +
                        " --schemes bf16 --kv-cache-memory 8KiB,1MiB --max-concurrency 1 "
                        "--result-dir " +
                        out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error [1]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fewer than one request"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(slurp(out + "/matrix.json"));
  ASSERT_EQ(j["cells"].size(), 2u);
  EXPECT_EQ(j["cells"][0]["status"], "error");
  EXPECT_NE(j["cells"][0]["error"].get<std::string>().find("before it was ready"),
            std::string::npos);
  EXPECT_EQ(j["cells"][1]["status"], "ok");  // the other budget still ran
  EXPECT_EQ(j["cells"][1]["completed"], 6);
}

TEST_F(BenchMatrixCli, BadInvocationsFailBeforeAnythingRuns) {
  const std::string out = dir_ + "/never";
  CliResult bad = run_cli("bench matrix" + common() + " --schemes bf16,w5x --result-dir " + out);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("unknown scheme 'w5x'"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("+fp8kv"), std::string::npos) << bad.output;  // lists the spellings
  CliResult suffix = run_cli("bench matrix" + common() + " --schemes w4g128+int8kv");
  EXPECT_EQ(suffix.exit_code, 2);
  EXPECT_NE(suffix.output.find("unknown suffix"), std::string::npos) << suffix.output;
  CliResult no_dir = run_cli("bench matrix" + common() + " --schemes ./nowhere");
  EXPECT_EQ(no_dir.exit_code, 2);
  EXPECT_NE(no_dir.output.find("not a checkpoint directory"), std::string::npos) << no_dir.output;
  CliResult budget = run_cli("bench matrix" + common() + " --kv-cache-memory 1MiB,lots");
  EXPECT_EQ(budget.exit_code, 2);
  EXPECT_NE(budget.output.find("--kv-cache-memory"), std::string::npos) << budget.output;
  EXPECT_FALSE(fs::exists(out));

  // A reference make-model did not write (transformers' generation_config): fp8 cannot be
  // made from it, since `quantize` writes int weight-only schemes only.
  const std::string real = dir_ + "/real";
  fs::copy(ref(), real);
  std::ofstream(real + "/generation_config.json")
      << R"({"bos_token_id": 1, "eos_token_id": 2, "transformers_version": "4.46.0"})";
  CliResult fp8 = run_cli("bench matrix --model " + real + " --schemes bf16,fp8 --no-plot");
  EXPECT_EQ(fp8.exit_code, 2);
  EXPECT_NE(fp8.output.find("give its directory in --schemes"), std::string::npos) << fp8.output;

  // The wrong seed: make-model does not reproduce the reference, and says what to do.
  CliResult seed =
      run_cli("bench matrix --model " + ref() +
              " --schemes w4g128 --make-model-seed 6 --no-plot --result-dir " + dir_ + "/seed");
  EXPECT_EQ(seed.exit_code, 1);
  EXPECT_NE(seed.output.find("does not reproduce"), std::string::npos) << seed.output;
  EXPECT_NE(seed.output.find("--make-model-seed"), std::string::npos) << seed.output;
}

}  // namespace
}  // namespace qs
