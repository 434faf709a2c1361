// golden: Karpathy's stories260K (models/stories260K, imported from llama2.c's .bin) greedy
// from BOS reproduces llama2.c's own test output byte for byte, in process through the
// Generator and through the real `quantserve generate` binary. `run -n 200` feeds BOS at
// position 0 and prints the 200 tokens sampled at positions 0..199, hence 200 new tokens.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "../common/shared_data.h"
#include "engine/generator.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";
constexpr int kNewTokens = 200;

std::string expected_stdout() {
  auto ref = io::read_json(::qs::testing::shared_data_dir() +
                           "/reference/llama2c_stories260K_expected.json");
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  return ref.ok() ? (*ref)["expected_stdout"].get<std::string>() : "";
}

// Runs `cmd` in a shell and returns its stdout; *exit_code gets the exit status.
std::string run_command(const std::string& cmd, int* exit_code) {
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  if (pipe == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *exit_code = WEXITSTATUS(pclose(pipe));
  return out;
}

struct Loaded {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
};

Loaded load(const std::string& dir) {
  Loaded l;
  auto model = models::Model::load(dir);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  auto tokenizer = tok::load_tokenizer(dir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  if (model.ok()) l.model = std::move(*model);
  if (tokenizer.ok()) l.tokenizer = std::move(*tokenizer);
  return l;
}

TEST(Stories260K, GreedyFromBosMatchesLlama2c) {
  QS_SKIP_WITHOUT_SHARED_DATA("reference/llama2c_stories260K_expected.json");
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);

  engine::GenerationRequest request;
  request.prompt_ids = l.tokenizer->encode("", /*add_special_tokens=*/true);
  ASSERT_EQ(request.prompt_ids, std::vector<int32_t>{1});  // BOS only
  request.params.temperature = 0.0f;
  request.params.max_tokens = kNewTokens;
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {2}, pool);
  std::string streamed;
  auto results =
      generator.generate({request}, [&](size_t, const StepOutput& step) { streamed += step.text; });
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  EXPECT_EQ((*results)[0].output_ids.size(), static_cast<size_t>(kNewTokens));
  EXPECT_EQ((*results)[0].finish_reason, "length");
  EXPECT_EQ((*results)[0].text, expected_stdout());
  EXPECT_EQ(streamed, expected_stdout());
}

// Requests batched together (different prompt lengths and budgets, greedy and seeded
// sampling, more prompt tokens than one step takes) each get what they get alone.
TEST(Stories260K, BatchedRequestsMatchTheirSoloRuns) {
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);
  std::vector<engine::GenerationRequest> requests(3);
  requests[0].prompt_ids = l.tokenizer->encode("Once upon a time", true);
  requests[0].params.temperature = 0.0f;
  requests[0].params.max_tokens = 40;
  requests[1].prompt_ids = l.tokenizer->encode("The cat", true);
  requests[1].params.temperature = 0.8f;
  requests[1].params.seed = 42;
  requests[1].params.max_tokens = 25;
  requests[2].prompt_ids = l.tokenizer->encode("", true);
  requests[2].params.temperature = 0.0f;
  requests[2].params.max_tokens = 7;
  // Five 480-token prompts: 2400 prompt tokens exceed one step's budget, so the last one is
  // prefilled in two chunks; the 512-token context ends each after 32 new tokens.
  std::string story;
  for (int i = 0; i < 200; ++i) story += "Tom had a red ball " + std::to_string(i) + ". ";
  for (int k = 0; k < 5; ++k) {
    engine::GenerationRequest r;
    r.prompt_ids = l.tokenizer->encode(story.substr(k * 7), true);
    ASSERT_GE(r.prompt_ids.size(), 480u);
    r.prompt_ids.resize(480);
    r.params.temperature = 0.0f;
    r.params.max_tokens = 100;
    requests.push_back(r);
  }
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {2}, pool);
  auto batched = generator.generate(requests);
  ASSERT_TRUE(batched.ok()) << batched.status().to_string();
  for (size_t i = 3; i < requests.size(); ++i) {
    EXPECT_EQ((*batched)[i].output_ids.size(), 32u);  // 480 + 32 = 512 positions
    EXPECT_EQ((*batched)[i].finish_reason, "length");
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    auto solo = generator.generate({requests[i]});
    ASSERT_TRUE(solo.ok()) << solo.status().to_string();
    EXPECT_EQ((*solo)[0].output_ids, (*batched)[i].output_ids) << "request " << i;
    EXPECT_EQ((*solo)[0].text, (*batched)[i].text) << "request " << i;
  }
}

TEST(Stories260K, GenerateCommandPrintsExactlyTheCompletion) {
  QS_SKIP_WITHOUT_SHARED_DATA("reference/llama2c_stories260K_expected.json");
  int code = -1;
  const std::string out =
      run_command(std::string(QS_BINARY) + " generate --model " + kModelDir +
                      " --prompt \"\" --temperature 0 --threads 1 " + "--max-tokens " +
                      std::to_string(kNewTokens) + " 2>/dev/null",
                  &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, expected_stdout());
}

// A stop string ends the completion before it, in process and through the binary.
TEST(Stories260K, StopStringEndsTheCompletion) {
  QS_SKIP_WITHOUT_SHARED_DATA("reference/llama2c_stories260K_expected.json");
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);
  engine::GenerationRequest request;
  request.prompt_ids = l.tokenizer->encode("", true);
  request.params.temperature = 0.0f;
  request.params.max_tokens = kNewTokens;
  request.params.stop = {"Lily"};
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {2}, pool);
  auto results = generator.generate({request});
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  const std::string want = expected_stdout().substr(0, expected_stdout().find("Lily"));
  EXPECT_EQ((*results)[0].text, want);
  EXPECT_EQ((*results)[0].finish_reason, "stop");

  int code = -1;
  const std::string out =
      run_command(std::string(QS_BINARY) + " generate --model " + kModelDir +
                      " --prompt \"\" --temperature 0 --threads 1 --stop Lily 2>/dev/null",
                  &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, want);
}

// The generator's EOS list ends a request ("stop", the EOS text left out) unless ignore_eos;
// bad requests are refused before any work.
TEST(Stories260K, EosIdsAndBadRequests) {
  QS_SKIP_WITHOUT_SHARED_DATA("reference/llama2c_stories260K_expected.json");
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);
  const int32_t period = l.tokenizer->piece_to_id(".");
  ASSERT_GE(period, 0);
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {period}, pool);
  engine::GenerationRequest request;
  request.prompt_ids = {1};
  request.params.temperature = 0.0f;
  request.params.max_tokens = 60;
  auto stopped = generator.generate({request});
  ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
  EXPECT_EQ((*stopped)[0].finish_reason, "stop");
  EXPECT_EQ((*stopped)[0].output_ids.back(), period);
  const std::string first_sentence = expected_stdout().substr(0, expected_stdout().find('.'));
  EXPECT_EQ((*stopped)[0].text, first_sentence);

  request.params.ignore_eos = true;
  auto ignored = generator.generate({request});
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ((*ignored)[0].finish_reason, "length");
  EXPECT_EQ((*ignored)[0].output_ids.size(), 60u);

  engine::GenerationRequest empty = request;
  empty.prompt_ids.clear();
  EXPECT_EQ(generator.generate({empty}).status().code(), StatusCode::kInvalidArgument);
  engine::GenerationRequest too_long = request;
  too_long.prompt_ids.assign(512, 1);
  EXPECT_EQ(generator.generate({too_long}).status().code(), StatusCode::kOutOfRange);
  engine::GenerationRequest bad_id = request;
  bad_id.prompt_ids = {1, 512};
  EXPECT_EQ(generator.generate({bad_id}).status().code(), StatusCode::kInvalidArgument);
  engine::GenerationRequest bad_params = request;
  bad_params.params.top_p = 0.0f;
  EXPECT_FALSE(generator.generate({bad_params}).ok());
}

// A budget whose KV cache could not fit in memory is refused up front (here: a copy of the
// model claiming a 2^30-token context, asked for 2^31 - 1 tokens: 1.3 TB of f32 K/V).
TEST(Stories260K, KvCacheLargerThanMemoryIsAnError) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "qs_stories260k_long";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kModelDir)) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  auto config = io::read_json((dir / "config.json").string());
  ASSERT_TRUE(config.ok());
  (*config)["max_position_embeddings"] = int64_t{1} << 30;
  fs::remove(dir / "config.json");
  ASSERT_TRUE(io::write_json((dir / "config.json").string(), *config).ok());
  Loaded l = load(dir.string());
  ASSERT_TRUE(l.model && l.tokenizer);
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {2}, pool);
  engine::GenerationRequest request;
  request.prompt_ids = {1};
  request.params.max_tokens = INT32_MAX;
  auto r = generator.generate({request});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("GiB"), std::string::npos) << r.status().message();
}

// --chat renders the chat template (here a minimal one added to a copy of the model) and
// tokenizes its output without adding BOS again.
TEST(Stories260K, ChatFlagUsesTheChatTemplate) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "qs_stories260k_chat";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kModelDir)) {
    fs::copy_file(e.path(), dir / e.path().filename());
  }
  auto config = io::read_json((dir / "tokenizer_config.json").string());
  ASSERT_TRUE(config.ok());
  (*config)["chat_template"] =
      "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %} The end.{% endif %}";
  fs::remove(dir / "tokenizer_config.json");
  ASSERT_TRUE(io::write_json((dir / "tokenizer_config.json").string(), *config).ok());

  Loaded l = load(dir.string());
  ASSERT_TRUE(l.model && l.tokenizer);
  engine::GenerationRequest request;
  request.prompt_ids = l.tokenizer->encode("<s>Tom was sad. The end.", false);
  ASSERT_EQ(request.prompt_ids.front(), 1);
  ASSERT_NE(request.prompt_ids[1], 1);
  request.params.temperature = 0.0f;
  request.params.max_tokens = 30;
  ThreadPool pool(1);
  engine::Generator generator(*l.model, *l.tokenizer, {2}, pool);
  auto results = generator.generate({request});
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  ASSERT_FALSE((*results)[0].text.empty());

  int code = -1;
  const std::string out = run_command(std::string(QS_BINARY) + " generate --model " + dir.string() +
                                          " --chat --prompt 'Tom was sad.' " +
                                          "--temperature 0 --max-tokens 30 --threads 1 2>/dev/null",
                                      &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, (*results)[0].text);
}

TEST(Stories260K, GenerateCommandReportsBadInput) {
  int code = -1;
  const std::string err = run_command(
      std::string(QS_BINARY) + " generate --model /nonexistent/dir --prompt hi 2>&1 >/dev/null",
      &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("/nonexistent/dir"), std::string::npos) << err;
  const std::string usage = run_command(std::string(QS_BINARY) + " generate --model " + kModelDir +
                                            " --max-tokens lots 2>&1 >/dev/null",
                                        &code);
  EXPECT_EQ(code, 2);
  EXPECT_NE(usage.find("--max-tokens"), std::string::npos) << usage;
}

}  // namespace
}  // namespace qs
