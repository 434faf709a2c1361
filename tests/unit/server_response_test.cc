// tests: response bodies, stream chunks and SSE framing in OpenAI's / vLLM's shapes.
#include <gtest/gtest.h>

#include "server/openai_response.h"
#include "server_test_model.h"

namespace qs::server {
namespace {

using json = nlohmann::ordered_json;
using qs::testing::ServerTestModel;

const ResponseHeader kHeader{"cmpl-abc", 1700000000, "tiny"};

TEST(ServerSseTest, Framing) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(ServerSseTest, InvalidUtf8IsReplacedNotThrown) {
  EXPECT_EQ(to_wire(json{{"text", std::string("a\xE2\x96")}}), "{\"text\":\"a\xEF\xBF\xBD\"}");
}

TEST(ServerResponseTest, CompletionBody) {
  ServerTestModel m;
  std::vector<Choice> choices(3);
  choices[0] = {0, "hello", "stop", std::string("END"), std::nullopt, {}};
  choices[1] = {1, "x", "stop", std::nullopt, 7, {}};
  choices[2] = {2, "abc", "length", std::nullopt, std::nullopt, {}};
  const json j = completion_response(kHeader, choices, Usage{5, 9}, false, *m.tokenizer);
  EXPECT_EQ(j["id"], "cmpl-abc");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 3u);
  EXPECT_EQ(
      j["choices"][0].dump(),
      R"({"index":0,"text":"hello","logprobs":null,"finish_reason":"stop","stop_reason":"END"})");
  EXPECT_EQ(j["choices"][1]["stop_reason"], 7);
  EXPECT_TRUE(j["choices"][2]["stop_reason"].is_null());
  EXPECT_EQ(
      j["usage"].dump(),
      R"({"prompt_tokens":5,"total_tokens":14,"completion_tokens":9,"prompt_tokens_details":null})");
}

TEST(ServerResponseTest, ChatBody) {
  ServerTestModel m;
  const json j = chat_response({"chatcmpl-1", 1, "tiny"},
                               {Choice{0, "hi there", "length", std::nullopt, std::nullopt, {}}},
                               Usage{3, 2}, false, *m.tokenizer);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"].dump(),
            R"({"role":"assistant","content":"hi there","tool_calls":[]})");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

TEST(ServerResponseTest, CachedTokensOnlyWhenReported) {
  // vLLM's --enable-prompt-tokens-details: {"cached_tokens": N}; without it, null.
  EXPECT_TRUE(usage_json(Usage{40, 2})["prompt_tokens_details"].is_null());
  EXPECT_EQ(usage_json(Usage{40, 2, 32})["prompt_tokens_details"].dump(),
            R"({"cached_tokens":32})");
  EXPECT_EQ(usage_json(Usage{40, 2, 0})["prompt_tokens_details"].dump(), R"({"cached_tokens":0})");
}

TEST(ServerResponseTest, Chunks) {
  const json c = completion_chunk(kHeader, 2, " the", "", nullptr, nullptr);
  EXPECT_EQ(c.dump(),
            R"({"id":"cmpl-abc","object":"text_completion","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":2,"text":" the","logprobs":null,"finish_reason":null,)"
            R"("stop_reason":null}]})");
  const json first =
      chat_chunk({"chatcmpl-1", 1, "tiny"}, 0, "assistant", "", "", nullptr, nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"].dump(), R"({"role":"assistant","content":""})");
  const json last =
      chat_chunk({"chatcmpl-1", 1, "tiny"}, 0, std::nullopt, "end", "stop", "\n", nullptr);
  EXPECT_EQ(last["choices"][0]["delta"].dump(), R"({"content":"end"})");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["stop_reason"], "\n");
  const json usage = usage_chunk(Endpoint::kChat, {"chatcmpl-1", 1, "tiny"}, Usage{4, 6});
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage["object"], "chat.completion.chunk");
  EXPECT_EQ(usage_chunk(Endpoint::kCompletions, kHeader, Usage{})["object"], "text_completion");
}

TEST(ServerResponseTest, CompletionLogprobs) {
  ServerTestModel m;
  const int32_t a = ServerTestModel::id('a'), b = ServerTestModel::id('b');
  std::vector<SampleLogprobs> lps = {{{a, -0.5f}, {{a, -0.5f}, {b, -1.5f}}}, {{b, -2.0f}, {}}};
  const json j = completion_logprobs_json(lps, *m.tokenizer, 10);
  EXPECT_EQ(j["tokens"].dump(), R"(["a","b"])");
  EXPECT_EQ(j["token_logprobs"].dump(), "[-0.5,-2.0]");
  EXPECT_EQ(j["top_logprobs"][0].dump(), R"({"a":-0.5,"b":-1.5})");
  EXPECT_EQ(j["text_offset"].dump(), "[10,11]");  // one byte per token here
}

TEST(ServerResponseTest, ChatLogprobs) {
  ServerTestModel m;
  const int32_t a = ServerTestModel::id('a');
  const json j = chat_logprobs_json({{{a, -0.25f}, {{a, -0.25f}}}}, *m.tokenizer);
  EXPECT_EQ(j.dump(), R"({"content":[{"token":"a","logprob":-0.25,"bytes":[97],"top_logprobs":)"
                      R"([{"token":"a","logprob":-0.25,"bytes":[97]}]}]})");
}

TEST(ServerResponseTest, ModelsAndTokenize) {
  ServerTestModel m;
  const json models = models_response(m.info, 42);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  const json& card = models["data"][0];
  EXPECT_EQ(card["id"], "tiny");
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["owned_by"], "vllm");
  EXPECT_EQ(card["root"], "/models/tiny");
  EXPECT_EQ(card["max_model_len"], 32);
  EXPECT_EQ(card["permission"][0]["object"], "model_permission");
  const json t = tokenize_response({ServerTestModel::id('h'), 2}, true, m.info);
  EXPECT_EQ(t.dump(),
            R"({"count":2,"max_model_len":32,"tokens":[75,2],"token_strs":["h","</s>"]})");
  EXPECT_TRUE(tokenize_response({}, false, m.info)["token_strs"].is_null());
}

}  // namespace
}  // namespace qs::server
