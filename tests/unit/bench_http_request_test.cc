// bench: base URL + endpoint parsing and the request body vLLM's openai / openai-chat request
// functions send (the wire itself is tested end to end in tests/server).
#include <gtest/gtest.h>

#include "bench_client/http_stream_client.h"

namespace qs::bench {
namespace {

TEST(BenchHttpRequest, EndpointFromBaseUrl) {
  auto a = make_endpoint("http://127.0.0.1:8000", "/v1/completions");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->scheme_host_port, "http://127.0.0.1:8000");
  EXPECT_EQ(a->prefix, "");
  EXPECT_EQ(a->path, "/v1/completions");
  EXPECT_FALSE(a->chat);

  auto b = make_endpoint("https://api.example.com/proxy/", "/v1/chat/completions");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme_host_port, "https://api.example.com");
  EXPECT_EQ(b->prefix, "/proxy");
  EXPECT_EQ(b->path, "/proxy/v1/chat/completions");
  EXPECT_TRUE(b->chat);
}

TEST(BenchHttpRequest, BadUrlsAndEndpointsAreErrors) {
  EXPECT_FALSE(make_endpoint("127.0.0.1:8000", "/v1/completions").ok());
  EXPECT_FALSE(make_endpoint("ftp://host", "/v1/completions").ok());
  EXPECT_FALSE(make_endpoint("http://host", "v1/completions").ok());
}

TEST(BenchHttpRequest, CompletionsBody) {
  auto ep = make_endpoint("http://h:1", "/v1/completions");
  ASSERT_TRUE(ep.ok());
  const auto body = request_body(*ep, "m", "Hello", 12, /*ignore_eos=*/false);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "Hello");
  EXPECT_EQ(body["max_tokens"], 12);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_FALSE(body.contains("ignore_eos"));
  EXPECT_FALSE(body.contains("messages"));
}

TEST(BenchHttpRequest, ChatBody) {
  auto ep = make_endpoint("http://h:1", "/v1/chat/completions");
  ASSERT_TRUE(ep.ok());
  const auto body = request_body(*ep, "m", "Hi", 3, /*ignore_eos=*/true);
  EXPECT_EQ(body["max_completion_tokens"], 3);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_FALSE(body.contains("prompt"));
  ASSERT_EQ(body["messages"].size(), 1u);
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"][0]["type"], "text");
  EXPECT_EQ(body["messages"][0]["content"][0]["text"], "Hi");
}

}  // namespace
}  // namespace qs::bench
