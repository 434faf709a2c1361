// io/hf_cache through the CLI: every command that takes a model directory takes a Hugging Face
// repo id found offline in the hub cache (huggingface_hub's layout: blobs/ holding the files,
// snapshots/<commit>/ of relative symlinks to them, refs/<branch> naming the commit), and its
// output equals the local directory's. The caches are built by hand from models/stories260K
// and the tiny FLUX pipeline; the resolver's own cases are in tests/unit/hf_cache_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../common/cli.h"
#include "core/json.h"
#include "flux_reference.h"

namespace qs {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::run_cli;

const std::string kStories = std::string(QS_SOURCE_DIR) + "/models/stories260K";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOldCommit = "fedcba9876543210fedcba9876543210fedcba98";

class HfCacheCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "qs_hfcache_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // main -> kCommit, tag v0 -> kOldCommit (the same files).
    add_repo("local/stories260K", kStories);
    add_repo("local/tiny-flux", testing::kFluxPipeline);
    // Every command below runs with this cache; the variable is this process's, restored after.
    if (const char* old = std::getenv("HF_HUB_CACHE")) old_cache_ = old;
    setenv("HF_HUB_CACHE", hub().c_str(), 1);
  }
  void TearDown() override {
    if (old_cache_.empty()) {
      unsetenv("HF_HUB_CACHE");
    } else {
      setenv("HF_HUB_CACHE", old_cache_.c_str(), 1);
    }
    fs::remove_all(dir_);
  }

  // models--owner--name: one blob per file of `source` (subfolders too, as a diffusers
  // pipeline has), linked from both snapshots by a relative path.
  void add_repo(std::string repo_id, const std::string& source) {
    repo_id.replace(repo_id.find('/'), 1, "--");
    const fs::path repo = fs::path(hub()) / ("models--" + repo_id);
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "refs");
    int n = 0;
    for (const auto& entry : fs::recursive_directory_iterator(source)) {
      if (!entry.is_regular_file()) continue;
      const fs::path rel = fs::relative(entry.path(), source);
      const std::string blob = "blob" + std::to_string(n++);
      fs::copy_file(entry.path(), repo / "blobs" / blob);
      fs::path up = "..";
      for (auto it = rel.begin(); it != rel.end(); ++it) up /= "..";
      for (const std::string& commit : {kCommit, kOldCommit}) {
        const fs::path link = repo / "snapshots" / commit / rel;
        fs::create_directories(link.parent_path());
        fs::create_symlink(up / "blobs" / blob, link);
      }
    }
    std::ofstream(repo / "refs" / "main") << kCommit;  // no newline, as the hub writes it
    std::ofstream(repo / "refs" / "v0") << kOldCommit;
  }

  std::string hub() const { return dir_ + "/hub"; }
  std::string dir_;
  std::string old_cache_;
};

// generate, chat, inspect, eval (--model and --reference), bench latency and throughput and
// quantize take the repo id where they take a directory, and print what the directory gives.
TEST_F(HfCacheCli, TextCommandsTakeTheRepoId) {
  const std::string gen = " --prompt \"Once upon a time\" --max-tokens 24 --temperature 0";
  CliResult by_dir = run_cli("generate --model " + kStories + gen, false);
  CliResult by_id = run_cli("generate --model local/stories260K" + gen, false);
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.output;
  ASSERT_EQ(by_id.exit_code, 0) << by_id.output;
  EXPECT_EQ(by_id.output, by_dir.output);
  CliResult tag = run_cli("generate --model local/stories260K --revision v0" + gen, false);
  EXPECT_EQ(tag.exit_code, 0) << tag.output;
  EXPECT_EQ(tag.output, by_dir.output);

  // stories260K has no chat template: chat gets as far as reading the v0 snapshot's files.
  CliResult chat = run_cli("chat --model local/stories260K --revision v0 < /dev/null");
  EXPECT_EQ(chat.exit_code, 1) << chat.output;
  EXPECT_NE(chat.output.find("no chat template in " + hub() +
                             "/models--local--stories260K/snapshots/" + kOldCommit),
            std::string::npos)
      << chat.output;

  // inspect and eval report the same figures; only the path they name differs.
  CliResult inspect_dir = run_cli("inspect " + kStories + " --json", false);
  CliResult inspect_id = run_cli("inspect local/stories260K --json", false);
  ASSERT_EQ(inspect_dir.exit_code, 0) << inspect_dir.output;
  ASSERT_EQ(inspect_id.exit_code, 0) << inspect_id.output;
  nlohmann::json i_dir = nlohmann::json::parse(inspect_dir.output);
  nlohmann::json i_id = nlohmann::json::parse(inspect_id.output);
  EXPECT_EQ(i_id["dir"], hub() + "/models--local--stories260K/snapshots/" + kCommit);
  i_dir.erase("dir");
  i_id.erase("dir");
  EXPECT_EQ(i_id, i_dir);

  const std::string ev = " --max-tokens 256 --seqlen 64 --threads 1 --json -";
  CliResult eval_dir = run_cli("eval --model " + kStories + " --reference " + kStories + ev, false);
  CliResult eval_id =
      run_cli("eval --model local/stories260K --reference local/stories260K" + ev, false);
  ASSERT_EQ(eval_dir.exit_code, 0) << eval_dir.output;
  ASSERT_EQ(eval_id.exit_code, 0) << eval_id.output;
  const nlohmann::json e_dir = nlohmann::json::parse(eval_dir.output);
  const nlohmann::json e_id = nlohmann::json::parse(eval_id.output);
  EXPECT_EQ(e_id["ppl"], e_dir["ppl"]);
  EXPECT_EQ(e_id["reference_ppl"], e_dir["reference_ppl"]);
  EXPECT_EQ(e_id["scored_tokens"], e_dir["scored_tokens"]);

  CliResult bench = run_cli(
      "bench latency --model local/stories260K --input-len 8 --output-len 4 --threads 1 "
      "--repetitions 1 --no-roofline");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  CliResult throughput = run_cli(
      "bench throughput --model local/stories260K --dataset-name random --num-prompts 2 "
      "--input-len 8 --output-len 4 --threads 1");
  EXPECT_EQ(throughput.exit_code, 0) << throughput.output;
  EXPECT_NE(throughput.output.find("Throughput:"), std::string::npos) << throughput.output;

  CliResult quant = run_cli("quantize --model local/stories260K --output_dir " + dir_ +
                            "/q --iters 0 --disable_opt_rtn --group_size 32");
  EXPECT_EQ(quant.exit_code, 0) << quant.output;
  CliResult quantized = run_cli("generate --model " + dir_ + "/q" + gen);
  EXPECT_EQ(quantized.exit_code, 0) << quantized.output;

  CliResult missing = run_cli("generate --model nobody/nothing" + gen);
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find(hub() + "/models--nobody--nothing"), std::string::npos)
      << missing.output;
  EXPECT_NE(missing.output.find("hf download nobody/nothing"), std::string::npos) << missing.output;
  CliResult bad_rev = run_cli("generate --model local/stories260K --revision v9" + gen);
  EXPECT_EQ(bad_rev.exit_code, 1) << bad_rev.output;
  EXPECT_NE(bad_rev.output.find("refs/v9"), std::string::npos) << bad_rev.output;
}

// generate-image draws the same PNG from the repo id as from the directory; quantize of the
// pipeline from the cache writes real files (the snapshot's symlinks point into blobs/, so a
// carried-over link would dangle in the output), and the output generates; compare-images takes
// a repo id on either side.
TEST_F(HfCacheCli, FluxPipelineByRepoId) {
  const std::string args =
      " --prompt 'a red square' --width 32 --height 32 --steps 2 --max-sequence-length 32"
      " --seed 3 --threads 2 --out ";
  const std::string by_dir = dir_ + "/dir.png", by_id = dir_ + "/id.png";
  CliResult a = run_cli("generate-image --model " + testing::kFluxPipeline + args + by_dir);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CliResult b = run_cli("generate-image --model local/tiny-flux --revision v0" + args + by_id);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(testing::slurp(by_id), testing::slurp(by_dir));

  const std::string q = dir_ + "/flux-w4";
  CliResult quant = run_cli("quantize --model local/tiny-flux --output_dir " + q +
                            " --iters 0 --disable_opt_rtn --group_size 32 --threads 2");
  ASSERT_EQ(quant.exit_code, 0) << quant.output;
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(q)) {
    EXPECT_FALSE(e.is_symlink()) << e.path();
    if (e.is_regular_file()) ++files;
  }
  EXPECT_GE(files, 10);
  CliResult from_quantized = run_cli("generate-image --model " + q + args + dir_ + "/q.png");
  EXPECT_EQ(from_quantized.exit_code, 0) << from_quantized.output;

  // compare-images takes repo ids for both sides: the cached pipeline against its local copy
  // draws identical images.
  std::ofstream(dir_ + "/prompts.txt") << "a red square\n";
  CliResult compare = run_cli("compare-images --reference local/tiny-flux --candidate " +
                                  testing::kFluxPipeline + " --prompts " + dir_ +
                                  "/prompts.txt --width 32 --height 32 --steps 2 "
                                  "--max-sequence-length 32 --threads 2",
                              false);
  ASSERT_EQ(compare.exit_code, 0) << compare.output;
  EXPECT_TRUE(nlohmann::json::parse(compare.output)["per_prompt"][0]["identical"].get<bool>())
      << compare.output;
}

}  // namespace
}  // namespace qs
