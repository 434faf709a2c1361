// golden: Karpathy's stories260K (models/stories260K, imported from llama2.c's .bin) greedy
// from BOS reproduces llama2.c's own test output byte for byte, in process through the
// Engine and through the real `quantserve generate` binary. `run -n 200` feeds BOS at
// position 0 and prints the 200 tokens sampled at positions 0..199, hence 200 new tokens.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "../common/engine_runner.h"
#include "../common/shared_data.h"
#include "core/json.h"
#include "engine/engine.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";
constexpr int kNewTokens = 200;

std::string expected_stdout() {
  auto ref =
      read_json(::qs::testing::shared_data_dir() + "/reference/llama2c_stories260K_expected.json");
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

  std::vector<int32_t> prompt = l.tokenizer->encode("", /*add_special_tokens=*/true);
  ASSERT_EQ(prompt, std::vector<int32_t>{1});  // BOS only
  ThreadPool pool(1);
  auto engine = testing::make_engine(*l.model, l.tokenizer.get(), {2}, pool, 512);
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->add_request(testing::greedy_request("a", prompt, kNewTokens)).ok());
  auto done = testing::run_to_completion(*engine);
  const testing::Completion& c = done["a"];
  EXPECT_EQ(c.ids.size(), static_cast<size_t>(kNewTokens));
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.text, expected_stdout());
  // Every token came in its own step, with the text streamed as it became final.
  EXPECT_EQ(c.n_outputs, kNewTokens);
}

// Requests batched together (different prompt lengths and budgets, greedy and seeded
// sampling, more prompt tokens than one step takes) each get what they get alone.
TEST(Stories260K, BatchedRequestsMatchTheirSoloRuns) {
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);
  std::vector<engine::EngineRequest> requests;
  requests.push_back(
      testing::greedy_request("0", l.tokenizer->encode("Once upon a time", true), 40));
  requests.push_back(testing::greedy_request("1", l.tokenizer->encode("The cat", true), 25));
  requests[1].params.temperature = 0.8f;
  requests[1].params.seed = 42;
  requests.push_back(testing::greedy_request("2", l.tokenizer->encode("", true), 7));
  // Five 480-token prompts: 2400 prompt tokens exceed one step's budget, so the last one is
  // prefilled in two chunks; the 512-token context ends each after 32 new tokens.
  std::string story;
  for (int i = 0; i < 200; ++i) story += "Tom had a red ball " + std::to_string(i) + ". ";
  for (int k = 0; k < 5; ++k) {
    std::vector<int32_t> prompt = l.tokenizer->encode(story.substr(k * 7), true);
    ASSERT_GE(prompt.size(), 480u);
    prompt.resize(480);
    requests.push_back(testing::greedy_request(std::to_string(3 + k), prompt, 100));
  }
  ThreadPool pool(1);
  auto batched_engine = testing::make_engine(*l.model, l.tokenizer.get(), {2}, pool, 8 * 512);
  ASSERT_TRUE(batched_engine);
  for (const auto& r : requests) ASSERT_TRUE(batched_engine->add_request(r).ok());
  auto batched = testing::run_to_completion(*batched_engine);
  for (size_t i = 3; i < requests.size(); ++i) {
    EXPECT_EQ(batched[requests[i].id].ids.size(), 32u);  // 480 + 32 = 512 positions
    EXPECT_EQ(batched[requests[i].id].finish_reason, "length");
  }
  engine::EngineConfig solo_config;
  solo_config.enable_prefix_caching = false;
  for (const auto& r : requests) {
    auto solo_engine =
        testing::make_engine(*l.model, l.tokenizer.get(), {2}, pool, 512, solo_config);
    ASSERT_TRUE(solo_engine);
    ASSERT_TRUE(solo_engine->add_request(r).ok());
    auto solo = testing::run_to_completion(*solo_engine);
    EXPECT_EQ(solo[r.id].ids, batched[r.id].ids) << "request " << r.id;
    EXPECT_EQ(solo[r.id].text, batched[r.id].text) << "request " << r.id;
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
  engine::EngineRequest request =
      testing::greedy_request("a", l.tokenizer->encode("", true), kNewTokens);
  request.params.stop = {"Lily"};
  ThreadPool pool(1);
  auto engine = testing::make_engine(*l.model, l.tokenizer.get(), {2}, pool, 512);
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->add_request(request).ok());
  auto done = testing::run_to_completion(*engine);
  const std::string want = expected_stdout().substr(0, expected_stdout().find("Lily"));
  EXPECT_EQ(done["a"].text, want);
  EXPECT_EQ(done["a"].finish_reason, "stop");

  int code = -1;
  const std::string out =
      run_command(std::string(QS_BINARY) + " generate --model " + kModelDir +
                      " --prompt \"\" --temperature 0 --threads 1 --stop Lily 2>/dev/null",
                  &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, want);
}

// The engine's EOS list ends a request ("stop", the EOS text left out) unless ignore_eos or
// before min_tokens; bad requests are refused at add_request with nothing queued.
TEST(Stories260K, EosIdsMinTokensAndBadRequests) {
  QS_SKIP_WITHOUT_SHARED_DATA("reference/llama2c_stories260K_expected.json");
  Loaded l = load(kModelDir);
  ASSERT_TRUE(l.model && l.tokenizer);
  const int32_t period = l.tokenizer->piece_to_id(".");
  ASSERT_GE(period, 0);
  ThreadPool pool(1);
  auto engine = testing::make_engine(*l.model, l.tokenizer.get(), {period}, pool, 1024);
  ASSERT_TRUE(engine);
  engine::EngineRequest request = testing::greedy_request("stopped", {1}, 60);
  ASSERT_TRUE(engine->add_request(request).ok());
  request.id = "ignored";
  request.params.ignore_eos = true;
  ASSERT_TRUE(engine->add_request(request).ok());
  request.id = "min";
  request.params.ignore_eos = false;
  request.params.min_tokens = 20;
  ASSERT_TRUE(engine->add_request(request).ok());
  auto done = testing::run_to_completion(*engine);

  const testing::Completion& stopped = done["stopped"];
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.ids.back(), period);
  const std::string first_sentence = expected_stdout().substr(0, expected_stdout().find('.'));
  EXPECT_EQ(stopped.text, first_sentence);
  ASSERT_LT(stopped.ids.size(), 20u);  // so that min_tokens below matters

  EXPECT_EQ(done["ignored"].finish_reason, "length");
  EXPECT_EQ(done["ignored"].ids.size(), 60u);

  // min_tokens: no period among the first 20 tokens, and the request still ends on one.
  const testing::Completion& min = done["min"];
  ASSERT_GE(min.ids.size(), 20u);
  for (size_t i = 0; i + 1 < 20; ++i) EXPECT_NE(min.ids[i], period) << "token " << i;
  EXPECT_EQ(min.finish_reason, "stop");
  EXPECT_EQ(min.ids.back(), period);

  engine::EngineRequest empty = request;
  empty.id = "empty";
  empty.prompt_ids.clear();
  EXPECT_EQ(engine->add_request(empty).code(), StatusCode::kInvalidArgument);
  engine::EngineRequest too_long = request;
  too_long.id = "too_long";
  too_long.prompt_ids.assign(512, 1);
  Status s = engine->add_request(too_long);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("leaves no room in the model's context of 512"), std::string::npos)
      << s.message();
  engine::EngineRequest bad_id = request;
  bad_id.id = "bad_id";
  bad_id.prompt_ids = {1, 512};
  EXPECT_EQ(engine->add_request(bad_id).code(), StatusCode::kInvalidArgument);
  engine::EngineRequest bad_params = request;
  bad_params.id = "bad_params";
  bad_params.params.top_p = 0.0f;
  EXPECT_FALSE(engine->add_request(bad_params).ok());
  bad_params.params.top_p = 1.0f;
  bad_params.params.logprobs = 21;
  EXPECT_FALSE(engine->add_request(bad_params).ok());
  EXPECT_FALSE(engine->has_unfinished());
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
  auto config = read_json((dir / "config.json").string());
  ASSERT_TRUE(config.ok());
  (*config)["max_position_embeddings"] = int64_t{1} << 30;
  fs::remove(dir / "config.json");
  ASSERT_TRUE(write_json((dir / "config.json").string(), *config).ok());
  int code = -1;
  const std::string err = run_command(std::string(QS_BINARY) + " generate --model " + dir.string() +
                                          " --max-tokens 2147483647 2>&1",
                                      &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("GiB"), std::string::npos) << err;
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
  auto config = read_json((dir / "tokenizer_config.json").string());
  ASSERT_TRUE(config.ok());
  (*config)["chat_template"] =
      "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %} The end.{% endif %}";
  fs::remove(dir / "tokenizer_config.json");
  ASSERT_TRUE(write_json((dir / "tokenizer_config.json").string(), *config).ok());

  Loaded l = load(dir.string());
  ASSERT_TRUE(l.model && l.tokenizer);
  std::vector<int32_t> prompt = l.tokenizer->encode("<s>Tom was sad. The end.", false);
  ASSERT_EQ(prompt.front(), 1);
  ASSERT_NE(prompt[1], 1);
  ThreadPool pool(1);
  auto engine = testing::make_engine(*l.model, l.tokenizer.get(), {2}, pool, 512);
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->add_request(testing::greedy_request("a", prompt, 30)).ok());
  auto done = testing::run_to_completion(*engine);
  ASSERT_FALSE(done["a"].text.empty());

  int code = -1;
  const std::string out = run_command(std::string(QS_BINARY) + " generate --model " + dir.string() +
                                          " --chat --prompt 'Tom was sad.' " +
                                          "--temperature 0 --max-tokens 30 --threads 1 2>/dev/null",
                                      &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, done["a"].text);
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
