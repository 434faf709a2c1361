// golden: Karpathy's stories260K (models/stories260K, imported from llama2.c's .bin) greedy
// from BOS reproduces llama2.c's own test output byte for byte, in process through the
// Generator and through the real `quantserve generate` binary. `run -n 200` feeds BOS at
// position 0 and prints the 200 tokens sampled at positions 0..199, hence 200 new tokens.
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "engine/generator.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";
constexpr int kNewTokens = 200;

std::string expected_stdout() {
  auto ref = io::read_json(std::string(QS_SHARED_DATA_DIR) +
                           "/reference/llama2c_stories260K_expected.json");
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  return ref.ok() ? (*ref)["expected_stdout"].get<std::string>() : "";
}

TEST(Stories260K, GreedyFromBosMatchesLlama2c) {
  auto model = models::Model::load(kModelDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto tokenizer = tok::load_tokenizer(kModelDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();

  engine::GenerationRequest request;
  request.prompt_ids = (*tokenizer)->encode("", /*add_special_tokens=*/true);
  ASSERT_EQ(request.prompt_ids, std::vector<int32_t>{1});  // BOS only
  request.params.temperature = 0.0f;
  request.params.max_tokens = kNewTokens;
  ThreadPool pool(1);
  engine::Generator generator(**model, **tokenizer, {2}, pool);
  std::string streamed;
  auto results =
      generator.generate({request}, [&](size_t, const StepOutput& step) { streamed += step.text; });
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  EXPECT_EQ((*results)[0].output_ids.size(), static_cast<size_t>(kNewTokens));
  EXPECT_EQ((*results)[0].finish_reason, "length");
  EXPECT_EQ((*results)[0].text, expected_stdout());
  EXPECT_EQ(streamed, expected_stdout());
}

TEST(Stories260K, GenerateCommandPrintsExactlyTheCompletion) {
  const std::string cmd = std::string(QS_BINARY) + " generate --model " + kModelDir +
                          " --prompt \"\" --temperature 0 --threads 1 --max-tokens " +
                          std::to_string(kNewTokens) + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << cmd;
  EXPECT_EQ(out, expected_stdout());
}

TEST(Stories260K, GenerateCommandReportsBadInput) {
  const std::string cmd =
      std::string(QS_BINARY) + " generate --model /nonexistent/dir --prompt hi 2>&1 >/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string err;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) err.append(buf, n);
  EXPECT_EQ(WEXITSTATUS(pclose(pipe)), 1);
  EXPECT_NE(err.find("/nonexistent/dir"), std::string::npos) << err;
}

}  // namespace
}  // namespace qs
