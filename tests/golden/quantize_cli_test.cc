// golden: `quantserve quantize` (RTN path, --iters 0 --disable_opt_rtn) through the built
// binary. Its tensors are bit-identical to `make-model --quantize` of the same seed in every
// export format; the result loads and runs; config.json and quantization_config.json carry
// the same dict; companion files are copied; layer_config and --quant_lm_head are honoured;
// sharded sources stay sharded; bad input (unsupported bits, a group size that divides
// nothing, tied lm_head, a calibration length past the context, an existing or read-only output, a
// full disk, an interrupted run) fails cleanly and leaves nothing half-written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "quant/pipeline.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;
using testing::slurp;

const std::string kRtn = " --iters 0 --disable_opt_rtn";

class QuantizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_quantize_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // Llama shapes that are all multiples of 32, untied so lm_head can be quantized.
    const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                   {"model_type", "llama"},
                                   {"hidden_size", 64},
                                   {"intermediate_size", 128},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"vocab_size", 96},
                                   {"max_position_embeddings", 64},
                                   {"rms_norm_eps", 1e-5},
                                   {"tie_word_embeddings", false},
                                   {"eos_token_id", 2}};
    std::ofstream(dir_ + "/tiny.json") << config.dump();
    CliResult r =
        run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 3 --out " + src());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(src() + "/tokenizer_config.json") << "{\"chat_template\": \"{{ x }}\"}";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string src() const { return dir_ + "/src"; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // Nothing but what the test made may remain in dir_: no staging directories.
  void expect_no_staging() const {
    for (const auto& e : fs::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().find("qs-staging"), std::string::npos) << e.path();
    }
  }

  std::string dir_;
};

void expect_same_tensors(const std::string& a_dir, const std::string& b_dir) {
  auto a = io::Checkpoint::open(a_dir);
  auto b = io::Checkpoint::open(b_dir);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->names(), b->names());
  for (const std::string& name : a->names()) {
    const Tensor ta = *a->get(name), tb = *b->get(name);
    ASSERT_EQ(ta.shape, tb.shape) << name;
    ASSERT_EQ(ta.dtype, tb.dtype) << name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes()), 0) << name;
  }
}

TEST_F(QuantizeCli, MatchesMakeModelRtnInEveryFormat) {
  for (const std::string format : {"auto_round", "auto_gptq", "auto_awq"}) {
    for (const std::string scheme : {"w4g32", "w4g32-asym", "w8g32"}) {
      if (format == "auto_awq" && scheme == "w8g32") continue;
      if (format == "auto_gptq" && scheme == "w4g32-asym") continue;  // v1 cannot store zero 0
      const std::string want = path("want_" + format + scheme);
      CliResult m = run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 3 " +
                            "--quantize " + scheme + " --format " + format + " --out " + want);
      ASSERT_EQ(m.exit_code, 0) << m.output;
      const std::string got = path("got_" + format + scheme);
      const std::string bits = scheme.substr(1, 1);
      CliResult q = run_cli("quantize --model " + src() + " --output_dir " + got + kRtn +
                            " --bits " + bits + " --group_size 32 --format " + format +
                            (scheme.ends_with("asym") ? " --asym" : ""));
      ASSERT_EQ(q.exit_code, 0) << q.output;
      SCOPED_TRACE(format + " " + scheme);
      expect_same_tensors(want, got);
      EXPECT_NE(q.output.find("| 14 | 1 |"), std::string::npos) << q.output;  // 14 linears, lm_head
      const auto config = nlohmann::json::parse(slurp(got + "/config.json"));
      EXPECT_EQ(config["quantization_config"],
                nlohmann::json::parse(slurp(got + "/quantization_config.json")));
      EXPECT_EQ(slurp(got + "/tokenizer_config.json"), slurp(src() + "/tokenizer_config.json"));
      EXPECT_TRUE(fs::exists(got + "/generation_config.json"));
      auto model = models::Model::load(got);
      ASSERT_TRUE(model.ok()) << model.status().to_string();
      EXPECT_TRUE((*model)->quant_config().quantized());
    }
  }
  expect_no_staging();
}

// llm-compressor's presets: RTN into compressed-tensors with no other flag, the same tensors
// and config as make-model's (whose configs the llm-compressor fixtures check).
TEST_F(QuantizeCli, W8A8AndFp8PresetsAsLlmCompressorWritesThem) {
  for (const auto& [scheme, preset] : std::vector<std::pair<std::string, std::string>>{
           {"W8A8", "w8a8"}, {"FP8_DYNAMIC", "fp8"}, {"FP8_BLOCK", "fp8-block"}}) {
    SCOPED_TRACE(scheme);
    const std::string want = path("want_" + preset);
    CliResult m = run_cli("make-model --config " + dir_ + "/tiny.json --dtype bf16 --seed 3 " +
                          "--quantize " + preset + " --out " + want);
    ASSERT_EQ(m.exit_code, 0) << m.output;
    const std::string got = path("got_" + preset);
    CliResult q =
        run_cli("quantize --model " + src() + " --output_dir " + got + " --scheme " + scheme);
    ASSERT_EQ(q.exit_code, 0) << q.output;
    EXPECT_NE(q.output.find(scheme + " ("), std::string::npos) << q.output;
    EXPECT_NE(q.output.find("as compressed-tensors"), std::string::npos) << q.output;
    EXPECT_NE(q.output.find(", RTN |"), std::string::npos) << q.output;
    expect_same_tensors(want, got);
    const auto made = nlohmann::json::parse(slurp(want + "/config.json"));
    const auto config = nlohmann::json::parse(slurp(got + "/config.json"));
    EXPECT_EQ(config["quantization_config"], made["quantization_config"]);
    auto model = models::Model::load(got);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
  }
  const std::string out = path("refused");
  for (const auto& [flags, why] : std::vector<std::pair<std::string, std::string>>{
           {"--scheme FP8_DYNAMIC --iters 200", "--iters 0 --disable_opt_rtn"},
           {"--scheme FP8_DYNAMIC --iters 0", "--iters 0 --disable_opt_rtn"},
           {"--scheme W8A8 --format auto_gptq", "compressed-tensors only"},
           {"--scheme W8A8 --bits 4", "fixed preset"},
           {"--scheme FP8", "unsupported scheme 'FP8'"}}) {
    CliResult r = run_cli("quantize --model " + src() + " --output_dir " + out + " " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    EXPECT_NE(r.output.find(why), std::string::npos) << flags << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists(out));
  expect_no_staging();
}

TEST_F(QuantizeCli, LayerConfigAndQuantLmHead) {
  const std::string out = path("mixed");
  CliResult q =
      run_cli("quantize --model " + src() + " --output_dir " + out + kRtn +
              " --group_size 32 --quant_lm_head --layer_config " +
              "'{\"down_proj\": {\"bits\": 8}, \"layers.1.self_attn.q_proj\": \"BF16\"}'");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_NE(q.output.find("kept 16-bit (--layer_config 'layers.1.self_attn.q_proj')"),
            std::string::npos)
      << q.output;
  const auto qc = nlohmann::json::parse(slurp(out + "/quantization_config.json"));
  EXPECT_EQ(qc["extra_config"]["model.layers.0.mlp.down_proj"], (nlohmann::json{{"bits", 8}}));
  EXPECT_EQ(qc["extra_config"]["lm_head"]["bits"], 4);
  EXPECT_EQ(qc["extra_config"]["model.layers.1.self_attn.q_proj"]["bits"], 16);
  auto model = models::Model::load(out);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (const auto& l : (*model)->linears()) {
    if (l.name == "lm_head") {
      EXPECT_EQ(l.scheme.bits, 4);
    } else if (l.name.ends_with("down_proj")) {
      EXPECT_EQ(l.scheme.bits, 8) << l.name;
    } else if (l.name == "model.layers.1.self_attn.q_proj") {
      EXPECT_FALSE(l.scheme.quantized());
    } else {
      EXPECT_EQ(l.scheme.bits, 4) << l.name;
    }
  }
  CliResult none = run_cli("quantize --model " + src() + " --output_dir " + path("x") + kRtn +
                           " --layer_config '{\"nothing_like_this\": {\"bits\": 8}}'");
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("matches no quantizable layer"), std::string::npos) << none.output;
}

TEST_F(QuantizeCli, ShardedSourceStaysSharded) {
  auto ckpt = io::Checkpoint::open(src());
  ASSERT_TRUE(ckpt.ok());
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& name : ckpt->names()) tensors.emplace_back(name, *ckpt->get(name));
  const std::string sharded = path("sharded");
  fs::create_directories(sharded);
  fs::copy_file(src() + "/config.json", sharded + "/config.json");
  ASSERT_TRUE(io::write_checkpoint(sharded, tensors, {{"format", "pt"}}, 40000).ok());
  ASSERT_TRUE(fs::exists(sharded + "/model.safetensors.index.json"));
  CliResult q = run_cli("quantize --model " + sharded + " --output_dir " + path("q") + kRtn +
                        " --group_size 32");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_TRUE(fs::exists(path("q") + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(path("q") + "/model.safetensors"));
  CliResult single = run_cli("quantize --model " + src() + " --output_dir " + path("s") + kRtn +
                             " --group_size 32");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  expect_same_tensors(path("q"), path("s"));
}

TEST_F(QuantizeCli, BadInputFailsCleanly) {
  const std::string out = path("out");
  auto run = [&](const std::string& extra) {
    return run_cli("quantize --model " + src() + " --output_dir " + out + " " + extra);
  };
  CliResult r = run(kRtn + " --bits 5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--bits 5 is not supported"), std::string::npos) << r.output;
  r = run(kRtn + " --group_size 96");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--group_size 96 divides the input size of no layer"), std::string::npos)
      << r.output;
  // The tuned modes plan the layers (stories260K's attention takes group 32) and check their
  // calibration length against the model before sampling.
  const std::string stories = std::string(QS_SOURCE_DIR) + "/models/stories260K";
  r = run_cli("quantize --model " + stories + " --output_dir " + out +
              " --group_size 32 --iters 200 --seqlen 1024 --nsamples 32");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--seqlen 1024 exceeds the model's max_position_embeddings 512"),
            std::string::npos)
      << r.output;
  // Calibration input problems are reported as such.
  r = run_cli("quantize --model " + stories + " --output_dir " + out + " --dataset " +
              path("missing.txt") + " --group_size 32 --seqlen 64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(path("missing.txt")), std::string::npos) << r.output;
  std::ofstream(path("empty.jsonl")).flush();
  r = run_cli("quantize --model " + stories + " --output_dir " + out + " --dataset " +
              path("empty.jsonl") + " --group_size 32 --seqlen 64");
  EXPECT_NE(r.output.find("holds no text"), std::string::npos) << r.output;
  std::ofstream(path("short.txt")) << "Once upon a time.\nThe end.\n";
  r = run_cli("quantize --model " + stories + " --output_dir " + out + " --dataset " +
              path("short.txt") + " --group_size 32 --seqlen 64");
  EXPECT_NE(r.output.find("shorter than one calibration sample of 64 tokens"), std::string::npos)
      << r.output;
  r = run(kRtn + " --scheme W5A16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unsupported scheme 'W5A16'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));

  // Tied lm_head cannot be quantized (autoround.md §1.7).
  nlohmann::json tied = nlohmann::json::parse(slurp(dir_ + "/tiny.json"));
  tied["tie_word_embeddings"] = true;
  std::ofstream(dir_ + "/tied.json") << tied.dump();
  ASSERT_EQ(run_cli("make-model --config " + dir_ + "/tied.json --out " + path("tied")).exit_code,
            0);
  r = run_cli("quantize --model " + path("tied") + " --output_dir " + out + kRtn +
              " --quant_lm_head");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("tied"), std::string::npos) << r.output;

  // An existing output is kept unless --overwrite, and replaced whole with it.
  fs::create_directories(out);
  std::ofstream(out + "/marker") << "keep me";
  r = run(kRtn);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("already exists; pass --overwrite"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(out + "/marker"));
  r = run(kRtn + " --overwrite --group_size 32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out + "/marker"));
  EXPECT_TRUE(fs::exists(out + "/quantization_config.json"));
  expect_no_staging();
}

TEST_F(QuantizeCli, UnwritableLocationsAndFullDiskLeaveNothing) {
  // Read-only: /sys refuses new directories even to root; a chmod-ed directory refuses them
  // to everyone else.
  CliResult r = run_cli("quantize --model " + src() + " --output_dir /sys/qs_quantize_out" + kRtn);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot create the staging directory"), std::string::npos) << r.output;
  if (geteuid() != 0) {
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    r = run_cli("quantize --model " + src() + " --output_dir " + path("ro/out") + kRtn);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    fs::permissions(path("ro"), fs::perms::owner_all);
    EXPECT_FALSE(fs::exists(path("ro/out")));
  }
  // A full disk, as a 64 KiB file-size limit: the first shard write fails (EFBIG).
  const std::string cmd = "ulimit -f 64; " + std::string(QS_BINARY) + " quantize --model " + src() +
                          " --output_dir " + path("full2") + kRtn + " --group_size 32 2>&1";
  FILE* p = popen(("sh -c '" + cmd + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  EXPECT_NE(out.find("File too large"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(path("full2")));
  expect_no_staging();
}

TEST_F(QuantizeCli, InterruptedRunLeavesNothing) {
  quant::QuantizeOptions o;
  o.model_dir = src();
  o.output_dir = path("interrupted");
  o.iters = 0;
  o.disable_opt_rtn = true;
  o.spec.group_size = 32;
  int polls = 0;
  auto r = quant::quantize(o, nullptr, [&] { return ++polls > 5; });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("interrupted"), std::string::npos);
  EXPECT_FALSE(fs::exists(o.output_dir));
  expect_no_staging();
  // Interrupted just before the rename: still nothing.
  polls = 0;
  int total = 0;
  ASSERT_TRUE(quant::quantize(o, nullptr, [&] { return ++total < 0; }).ok());  // counts polls
  fs::remove_all(o.output_dir);
  r = quant::quantize(o, nullptr, [&] { return ++polls >= total; });
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(o.output_dir));
  expect_no_staging();
}

}  // namespace
}  // namespace qs
