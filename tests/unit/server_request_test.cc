// tests: OpenAI request parsing and validation: prompt forms, chat rendering, defaults,
// vLLM's length checks and messages, wrong types, unknown and unsupported fields, and the
// error envelope.
#include <gtest/gtest.h>

#include "server/openai_request.h"
#include "server_test_model.h"

namespace qs::server {
namespace {

using qs::testing::ServerTestModel;

class ServerRequestTest : public ::testing::Test {
 protected:
  std::optional<ApiError> parse(Endpoint e, const std::string& body) {
    return parse_generation_request(e, body, m_.info, &r_);
  }
  // Parses a body that must be rejected and returns the error.
  ApiError reject(Endpoint e, const std::string& body) {
    auto err = parse(e, body);
    EXPECT_TRUE(err.has_value()) << body;
    return err.value_or(ApiError{});
  }
  int32_t max_tokens(size_t prompt = 0) {
    int32_t n = 0;
    EXPECT_FALSE(max_tokens_for(r_, r_.prompts.at(prompt), m_.info, &n));
    return n;
  }

  ServerTestModel m_;
  GenerationRequest r_;
};

constexpr Endpoint kCompl = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChat;

TEST_F(ServerRequestTest, StringPromptWithDefaults) {
  ASSERT_FALSE(parse(kCompl, R"({"model": "tiny", "prompt": "hi"})"));
  ASSERT_EQ(r_.prompts.size(), 1u);
  EXPECT_EQ(r_.prompts[0].ids,
            (std::vector<int32_t>{ServerTestModel::id('h'), ServerTestModel::id('i')}));
  EXPECT_EQ(r_.prompts[0].text, "hi");
  EXPECT_EQ(r_.model, "tiny");
  EXPECT_EQ(r_.n, 1);
  EXPECT_FALSE(r_.stream);
  EXPECT_EQ(max_tokens(), 16);  // vLLM's completions default
  EXPECT_FLOAT_EQ(r_.params.temperature, 1.0f);
  EXPECT_TRUE(r_.ignored_fields.empty());
}

TEST_F(ServerRequestTest, ModelMayBeLeftOutButNotWrong) {
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "hi"})"));
  EXPECT_EQ(r_.model, "tiny");
  ApiError e = reject(kCompl, R"({"model": "gpt-4", "prompt": "hi"})");
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.type, "NotFoundError");
  EXPECT_EQ(e.message, "The model `gpt-4` does not exist.");
}

TEST_F(ServerRequestTest, PromptForms) {
  ASSERT_FALSE(parse(kCompl, R"({"prompt": ["ab", "c"]})"));
  ASSERT_EQ(r_.prompts.size(), 2u);
  EXPECT_EQ(r_.prompts[1].text, "c");
  ASSERT_FALSE(parse(kCompl, R"({"prompt": [1, 68, 69]})"));
  ASSERT_EQ(r_.prompts.size(), 1u);
  EXPECT_EQ(r_.prompts[0].ids, (std::vector<int32_t>{1, 68, 69}));
  EXPECT_EQ(r_.prompts[0].text, "<s>ab");  // decoded with special tokens, for echo
  ASSERT_FALSE(parse(kCompl, R"({"prompt": [[68], [69, 70]]})"));
  ASSERT_EQ(r_.prompts.size(), 2u);
  EXPECT_EQ(r_.prompts[1].ids, (std::vector<int32_t>{69, 70}));
}

TEST_F(ServerRequestTest, BadPrompts) {
  for (const char* body : {R"({"prompt": 5})", R"({"prompt": []})", R"({"prompt": [1, "a"]})",
                           R"({"prompt": {"text": "a"}})", R"({})", R"({"prompt": ""})"}) {
    ApiError e = reject(kCompl, body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, "prompt") << body;
  }
  ApiError e = reject(kCompl, R"({"prompt": [1, 5000]})");
  EXPECT_NE(e.message.find("out of vocabulary"), std::string::npos) << e.message;
}

TEST_F(ServerRequestTest, MalformedBodies) {
  EXPECT_EQ(reject(kCompl, "{\"prompt\": ").message, "The request body is not valid JSON.");
  EXPECT_EQ(reject(kCompl, "[1, 2]").message, "The request body must be a JSON object.");
}

TEST_F(ServerRequestTest, WrongTypesNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "a", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "a", "n": "2"})", "n"},
      {R"({"prompt": "a", "stream": 1})", "stream"},
      {R"({"prompt": "a", "stop": 5})", "stop"},
      {R"({"prompt": "a", "stop": ["x", 1]})", "stop"},
      {R"({"prompt": "a", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "a", "max_tokens": "4"})", "max_tokens"},
      {R"({"prompt": "a", "seed": "x"})", "seed"},
      {R"({"prompt": "a", "ignore_eos": "yes"})", "ignore_eos"},
      {R"({"prompt": "a", "stop_token_ids": 3})", "stop_token_ids"},
      {R"({"prompt": "a", "model": 3})", "model"},
  };
  for (const auto& [body, param] : cases) {
    ApiError e = reject(kCompl, body);
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.type, "BadRequestError") << body;
    EXPECT_EQ(e.param, param) << body;
  }
  // pydantic's lax mode: a float with an integral value is an integer.
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "max_tokens": 4.0})"));
  EXPECT_EQ(max_tokens(), 4);
}

TEST_F(ServerRequestTest, MaxTokensChecks) {
  ApiError neg = reject(kCompl, R"({"prompt": "a", "max_tokens": -1})");
  EXPECT_EQ(neg.message, "max_tokens must be at least 1, got -1.");
  ApiError zero = reject(kCompl, R"({"prompt": "a", "max_tokens": 0})");
  EXPECT_EQ(zero.http_status, 400);
  // prompt (2 tokens) + max_tokens must fit the 32-token context.
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "ab", "max_tokens": 30})"));
  EXPECT_EQ(max_tokens(), 30);
  ApiError huge = reject(kCompl, R"({"prompt": "ab", "max_tokens": 31})");
  EXPECT_EQ(huge.message,
            "'max_tokens' or 'max_completion_tokens' is too large: 31. This model's maximum "
            "context length is 32 tokens and your request has 2 input tokens (31 > 32 - 2).");
  ApiError very_huge = reject(kCompl, R"({"prompt": "ab", "max_tokens": 100000000000})");
  EXPECT_NE(very_huge.message.find("is too large"), std::string::npos);
  ApiError too_big = reject(kCompl, R"({"prompt": "ab", "max_tokens": 1e300})");
  EXPECT_EQ(too_big.param, "max_tokens");
}

TEST_F(ServerRequestTest, PromptLongerThanTheContext) {
  const std::string prompt(32, 'x');
  ApiError e = reject(kCompl, R"({"prompt": ")" + prompt + R"("})");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 32 tokens. However, your request has 32 "
            "input tokens. Please reduce the length of the input messages.");
}

TEST_F(ServerRequestTest, SamplingFields) {
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "temperature": 0, "top_p": 0.5, "top_k": 4,
      "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.2, "seed": -1, "stop": "x", "stop_token_ids": [5],
      "ignore_eos": true, "skip_special_tokens": false, "include_stop_str_in_output": true,
      "n": 3, "user": "me", "min_tokens": 2, "echo": true})"));
  const SamplingParams& p = r_.params;
  EXPECT_FLOAT_EQ(p.temperature, 0.0f);
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.top_k, 4);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(UINT64_MAX));  // int64 -1, all 64 bits
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{5});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_EQ(r_.n, 3);
  EXPECT_EQ(r_.user, "me");
  EXPECT_EQ(r_.params.min_tokens, 2);
  EXPECT_TRUE(r_.echo);
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "stop": ["x", "yz"]})"));
  EXPECT_EQ(r_.params.stop, (std::vector<std::string>{"x", "yz"}));
}

TEST_F(ServerRequestTest, SamplingRangesUseVllmMessages) {
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "temperature": 3})").message,
            "temperature must be in [0, 2], got 3.");
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "top_p": 0})").message,
            "top_p must be in (0, 1], got 0.");
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "n": 0})").param, "n");
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "stop": [""]})").message,
            "stop cannot contain an empty string.");
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "min_tokens": 17})").param, "min_tokens");
}

TEST_F(ServerRequestTest, ModelDefaultsApplyUnlessTheRequestSetsThem) {
  m_.info.defaults.temperature = 0.6f;
  m_.info.defaults.top_p = 0.9f;
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "top_p": 0.5})"));
  EXPECT_FLOAT_EQ(r_.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(r_.params.top_p, 0.5f);
}

TEST_F(ServerRequestTest, StreamOptions) {
  ASSERT_FALSE(parse(
      kCompl, R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": true}})"));
  EXPECT_TRUE(r_.stream);
  EXPECT_TRUE(r_.include_usage);
  EXPECT_FALSE(r_.continuous_usage_stats);
  ApiError e = reject(kCompl, R"({"prompt": "a", "stream_options": {"include_usage": true}})");
  EXPECT_EQ(e.message, "Stream options can only be defined when `stream=True`.");
}

TEST_F(ServerRequestTest, Logprobs) {
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "logprobs": 5})"));
  EXPECT_EQ(r_.params.logprobs, std::optional<int32_t>(5));
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a"})"));
  EXPECT_FALSE(r_.params.logprobs.has_value());
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "logprobs": 21})").message,
            "Requested sample logprobs of 21, which is greater than max allowed: 20");
  ASSERT_FALSE(parse(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                                "logprobs": true, "top_logprobs": 3})"));
  EXPECT_EQ(r_.params.logprobs, std::optional<int32_t>(3));
  ASSERT_FALSE(parse(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                                "logprobs": true})"));
  EXPECT_EQ(r_.params.logprobs, std::optional<int32_t>(0));
  EXPECT_EQ(reject(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                              "top_logprobs": 3})")
                .message,
            "when using `top_logprobs`, `logprobs` must be set to true.");
  EXPECT_EQ(reject(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                              "logprobs": 2})")
                .param,
            "logprobs");
}

TEST_F(ServerRequestTest, ChatRendersMessagesWithTheTemplate) {
  ASSERT_FALSE(parse(kChat, R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})"));
  ASSERT_EQ(r_.prompts.size(), 1u);
  EXPECT_EQ(r_.prompts[0].text, "<system>s<user>a\nb<assistant>");
  EXPECT_EQ(r_.prompts[0].ids.size(), r_.prompts[0].text.size());
  // No max_tokens: what is left of the context, as vLLM.
  EXPECT_EQ(max_tokens(), 32 - static_cast<int32_t>(r_.prompts[0].ids.size()));
  ASSERT_FALSE(parse(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                                "add_generation_prompt": false})"));
  EXPECT_EQ(r_.prompts[0].text, "<user>a");
}

TEST_F(ServerRequestTest, ChatMaxCompletionTokensWinsOverMaxTokens) {
  ASSERT_FALSE(parse(kChat, R"({"messages": [{"role": "user", "content": "a"}],
                                "max_tokens": 3, "max_completion_tokens": 5})"));
  EXPECT_EQ(max_tokens(), 5);
  ASSERT_FALSE(
      parse(kChat, R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 3})"));
  EXPECT_EQ(max_tokens(), 3);
}

TEST_F(ServerRequestTest, BadChatRequests) {
  EXPECT_EQ(reject(kChat, R"({"messages": []})").param, "messages");
  EXPECT_EQ(reject(kChat, R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(reject(kChat, R"({"messages": [{"content": "a"}]})").param, "messages");
  EXPECT_EQ(reject(kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
                .param,
            "messages");
  EXPECT_EQ(reject(kChat, R"({"prompt": "a"})").param, "prompt");
  EXPECT_EQ(reject(kCompl, R"({"messages": [{"role": "user", "content": "a"}]})").param,
            "messages");
  m_.info.chat_template = nullptr;
  EXPECT_NE(reject(kChat, R"({"messages": [{"role": "user", "content": "a"}]})")
                .message.find("chat template"),
            std::string::npos);
}

TEST_F(ServerRequestTest, UnknownFieldsAreIgnoredUnsupportedOnesRejected) {
  ASSERT_FALSE(parse(kCompl, R"({"prompt": "a", "frobnicate": 1, "logit_bias": null,
                                 "tools": [], "use_beam_search": false})"));
  EXPECT_EQ(r_.ignored_fields, std::vector<std::string>{"frobnicate"});
  ApiError e = reject(kCompl, R"({"prompt": "a", "logit_bias": {"5": 10}})");
  EXPECT_EQ(e.message, "'logit_bias' is not supported by quantserve.");
  EXPECT_EQ(e.param, "logit_bias");
  EXPECT_EQ(reject(kCompl, R"({"prompt": "a", "response_format": {"type": "json_object"}})").param,
            "response_format");
  EXPECT_FALSE(parse(kCompl, R"({"prompt": "a", "response_format": {"type": "text"}})"));
}

TEST_F(ServerRequestTest, TokenizeAndDetokenize) {
  TokenizeRequest t;
  ASSERT_FALSE(
      parse_tokenize_request(R"({"prompt": "ab", "return_token_strs": true})", m_.info, &t));
  EXPECT_EQ(t.ids, (std::vector<int32_t>{ServerTestModel::id('a'), ServerTestModel::id('b')}));
  EXPECT_TRUE(t.return_token_strs);
  ASSERT_FALSE(
      parse_tokenize_request(R"({"messages": [{"role": "user", "content": "a"}]})", m_.info, &t));
  EXPECT_EQ(t.ids.size(), std::string("<user>a<assistant>").size());
  EXPECT_EQ(parse_tokenize_request(R"({"model": "x", "prompt": "a"})", m_.info, &t)->http_status,
            404);
  DetokenizeRequest d;
  ASSERT_FALSE(parse_detokenize_request(R"({"tokens": [68, 69]})", m_.info, &d));
  EXPECT_EQ(d.ids, (std::vector<int32_t>{68, 69}));
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [-1]})", m_.info, &d)->param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": "ab"})", m_.info, &d)->param, "tokens");
}

TEST(ServerApiErrorTest, OpenAiEnvelope) {
  const auto j = bad_request("bad n", "n").to_json();
  EXPECT_EQ(j.dump(),
            R"({"error":{"message":"bad n","type":"BadRequestError","param":"n","code":400}})");
  EXPECT_TRUE(model_not_found("m").to_json()["error"]["code"] == 404);
  EXPECT_TRUE(unauthorized().to_json()["error"]["param"].is_null());
  EXPECT_EQ(unauthorized().http_status, 401);
  EXPECT_EQ(error_from_status(invalid_argument("x")).http_status, 400);
  EXPECT_EQ(error_from_status(internal_error("x")).http_status, 500);
}

}  // namespace
}  // namespace qs::server
