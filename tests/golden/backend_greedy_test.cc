// The same greedy tokens on every backend: stories260K (trained weights) and the golden
// families (tests/golden/fixtures/hf, quant) decoded greedily on the CPU and on each other
// backend this build and machine have (cuda:0), through Model::forward with a KV cache the
// model's backend allocated. A device backend multiplies bf16 activations (as vLLM does) where
// the CPU keeps f32, so a step where the CPU's two best logits are closer than kTieFraction of
// the logits' range (best minus worst) may flip; the comparison stops at such a step (the greedy
// prefix before it must agree) and says so. A backend that is missing skips by name; a family the
// backend refuses (MoE on a device) is reported and skipped. The CLI's --device: cpu gives the
// default's text here, a misspelt device and one the build or machine lacks are refused before
// anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "core/device.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "ops/backend.h"

namespace qs {
namespace {

constexpr int kSteps = 24;
constexpr float kTieFraction = 0.005f;

struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> margins;  // per step: (best - second best) / (best - worst) logit
};

Result<Decoded> greedy(const models::Model& model, std::vector<int32_t> prompt) {
  const models::ModelConfig& c = model.local_config();
  const int64_t total = static_cast<int64_t>(prompt.size()) + kSteps;
  engine::KvCache cache({c.n_layers, c.n_kv_heads, c.head_dim, (total + 15) / 16, 16},
                        model.backend());
  QS_RETURN_IF_ERROR(cache.reserve(0, total));
  ThreadPool pool(2);
  Decoded out;
  std::vector<float> logits;
  int64_t pos = 0;
  std::vector<int32_t> next = std::move(prompt);
  for (int step = 0; step < kSteps; ++step) {
    models::ForwardBatch batch;
    batch.token_ids = next;
    const int64_t n = static_cast<int64_t>(next.size());
    batch.seqs = {{0, n, pos, cache.block_table(0)}};
    QS_RETURN_IF_ERROR(model.forward(batch, cache.layers(), pool, &logits));
    pos += n;
    const auto best = std::max_element(logits.begin(), logits.end());
    float second = -1e30f;
    for (auto it = logits.begin(); it != logits.end(); ++it) {
      if (it != best) second = std::max(second, *it);
    }
    const float worst = *std::min_element(logits.begin(), logits.end());
    out.tokens.push_back(static_cast<int32_t>(best - logits.begin()));
    out.margins.push_back((*best - second) / std::max(*best - worst, 1e-30f));
    next = {out.tokens.back()};
  }
  return out;
}

std::vector<std::string> model_dirs() {
  std::vector<std::string> dirs = {std::string(QS_SOURCE_DIR) + "/models/stories260K"};
  for (const char* sub : {"hf", "quant"}) {
    const std::filesystem::path root =
        std::filesystem::path(QS_SOURCE_DIR) / "tests/golden/fixtures" / sub;
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(root)) {
      if (std::filesystem::exists(e.path() / "config.json")) found.push_back(e.path().string());
    }
    std::sort(found.begin(), found.end());
    dirs.insert(dirs.end(), found.begin(), found.end());
  }
  return dirs;
}

class BackendGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendGreedy, EveryModelDecodesAsOnTheCpu) {
  auto device = parse_device(GetParam());
  ASSERT_TRUE(device.ok());
  auto backend = ops::backend_for(*device);
  if (!backend.ok()) GTEST_SKIP() << GetParam() << ": " << backend.status().message();
  int compared = 0;
  for (const std::string& dir : model_dirs()) {
    SCOPED_TRACE(dir);
    auto cpu = models::Model::load(dir);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    models::LoadOptions options;
    options.device = *device;
    auto other = models::Model::load(dir, options);
    const int32_t vocab = static_cast<int32_t>((*cpu)->config().vocab_size);
    const std::vector<int32_t> prompt = {1 % vocab, 100 % vocab, 37 % vocab, 250 % vocab};
    auto want = greedy(**cpu, prompt);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    if (!other.ok()) {
      // A scheme or family this backend has no kernel for says so at load.
      ASSERT_EQ(other.status().code(), StatusCode::kUnimplemented) << other.status().to_string();
      std::printf("%s on %s: %s\n", dir.c_str(), GetParam().c_str(),
                  other.status().message().c_str());
      continue;
    }
    auto got = greedy(**other, prompt);
    if (!got.ok() && got.status().code() == StatusCode::kUnimplemented) {
      std::printf("%s on %s: %s\n", dir.c_str(), GetParam().c_str(),
                  got.status().message().c_str());
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (int i = 0; i < kSteps; ++i) {
      if (want->margins[i] < kTieFraction) {
        std::printf("%s: compared %d steps; step %d is a near tie on the CPU (margin %.4f)\n",
                    dir.c_str(), i, i, want->margins[i]);
        break;
      }
      ASSERT_EQ(got->tokens[i], want->tokens[i]) << "step " << i;
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST(DeviceFlag, CpuIsTheDefaultHereAndUnknownDevicesAreRefused) {
  const std::string gen = "generate --model " + std::string(QS_SOURCE_DIR) +
                          "/models/stories260K --prompt 'Once upon a time' --max-tokens 24 "
                          "--temperature 0";
  const testing::CliResult cpu = testing::run_cli(gen + " --device cpu", false);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  if (ops::resolve_device("auto")->is_cpu()) {
    const testing::CliResult def = testing::run_cli(gen, false);
    ASSERT_EQ(def.exit_code, 0) << def.output;
    EXPECT_EQ(def.output, cpu.output);
  }
  const testing::CliResult bad = testing::run_cli(gen + " --device gpu");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--device: unknown device 'gpu': expected cpu, cuda or cuda:N"),
            std::string::npos)
      << bad.output;
  if (ops::cuda_device_count() <= 7) {
    const testing::CliResult missing = testing::run_cli(gen + " --device cuda:7");
    EXPECT_EQ(missing.exit_code, 1) << missing.output;
    EXPECT_NE(missing.output.find("device cuda:7: "), std::string::npos) << missing.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, BackendGreedy, ::testing::Values("cpu", "cuda:0"),
                         [](const auto& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), ':', '_');
                           return s;
                         });

}  // namespace
}  // namespace qs
