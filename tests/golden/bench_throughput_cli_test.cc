// golden: `quantserve bench throughput` runs every request of a dataset through the engine at
// once on the shipped stories260K and reports vLLM's numbers: output tokens are exact
// (ignore_eos, max_tokens = the dataset's output length) and the rates agree with the counts.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

namespace qs {
namespace {

const std::string kModel = std::string(QS_SOURCE_DIR) + "/models/stories260K";

TEST(BenchThroughputCli, RandomDatasetCountsAndRates) {
  const std::string json_path =
      (std::filesystem::temp_directory_path() / "qs_bench_throughput.json").string();
  std::filesystem::remove(json_path);
  const auto r = testing::run_cli("bench throughput --model " + kModel +
                                      " --dataset-name random --input-len 32 --output-len 16"
                                      " --num-prompts 8 --threads 1 --output-json " +
                                      json_path,
                                  /*stderr_too=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("Throughput: ([0-9.]+) requests/s, ([0-9.]+) total tokens/s, ([0-9.]+) output "
                 "tokens/s\nTotal num prompt tokens:  ([0-9]+)\nTotal num output tokens:  "
                 "([0-9]+)\n")))
      << r.output;
  const int64_t prompt_tokens = std::stoll(m[4]), output_tokens = std::stoll(m[5]);
  EXPECT_EQ(output_tokens, 8 * 16);
  // 32 tokens with BOS each; re-encoding the decoded ids may leave one or two off.
  EXPECT_NEAR(prompt_tokens, 8 * 32, 8 * 2);

  const nlohmann::json j = nlohmann::json::parse(testing::slurp(json_path));
  EXPECT_EQ(j["num_requests"], 8);
  EXPECT_EQ(j["total_num_tokens"], prompt_tokens + output_tokens);
  const double elapsed = j["elapsed_time"];
  ASSERT_GT(elapsed, 0.0);
  EXPECT_NEAR(j["requests_per_second"].get<double>(), 8 / elapsed, 1e-9);
  EXPECT_NEAR(j["tokens_per_second"].get<double>(), (prompt_tokens + output_tokens) / elapsed,
              1e-6);
  EXPECT_NEAR(std::stod(m[1]), 8 / elapsed, 0.01);
  std::filesystem::remove(json_path);
}

TEST(BenchThroughputCli, ShareGptNeedsAPath) {
  const auto r = testing::run_cli("bench throughput --model " + kModel +
                                  " --dataset-name sharegpt --num-prompts 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--dataset-path"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace qs
