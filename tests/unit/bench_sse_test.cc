// bench: the SSE parser gives the same events however the bytes are split.
#include <gtest/gtest.h>

#include "bench_client/sse.h"

namespace qs::bench {
namespace {

std::vector<std::string> feed_all(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    for (auto& e : p.feed(piece)) out.push_back(e);
  }
  for (auto& e : p.finish()) out.push_back(e);
  return out;
}

const std::string kStream =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"
    "event: message\nid: 7\n"
    "data:{\"x\":1}\n\n"
    "data: line one\ndata: line two\n\n"
    "retry: 10\n\n"  // an event with no data is no event
    "data: [DONE]\n\n";

const std::vector<std::string> kEvents = {"{\"choices\":[{\"text\":\"a\"}]}", "{\"x\":1}",
                                          "line one\nline two", "[DONE]"};

TEST(BenchSse, WholeStream) {
  EXPECT_EQ(feed_all({kStream}), kEvents);
}

TEST(BenchSse, EverySplitPoint) {
  for (size_t i = 0; i <= kStream.size(); ++i) {
    EXPECT_EQ(feed_all({kStream.substr(0, i), kStream.substr(i)}), kEvents) << "split at " << i;
  }
}

TEST(BenchSse, ByteByByte) {
  std::vector<std::string> bytes;
  for (char c : kStream) bytes.push_back(std::string(1, c));
  EXPECT_EQ(feed_all(bytes), kEvents);
}

TEST(BenchSse, EventsReturnedAsSoonAsComplete) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: a").empty());
  EXPECT_TRUE(p.feed("\n").empty());
  EXPECT_EQ(p.feed("\ndata: b\n"), std::vector<std::string>{"a"});
  EXPECT_EQ(p.feed("\n"), std::vector<std::string>{"b"});
}

TEST(BenchSse, LoneCarriageReturnEndsLines) {
  EXPECT_EQ(feed_all({"data: a\r\rdata: b\r", "\r"}), (std::vector<std::string>{"a", "b"}));
}

TEST(BenchSse, UnterminatedLastEventComesOutAtFinish) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: [DONE]").empty());
  EXPECT_EQ(p.finish(), std::vector<std::string>{"[DONE]"});
}

TEST(BenchSse, EmptyDataIsAnEvent) {
  EXPECT_EQ(feed_all({"data:\n\n"}), std::vector<std::string>{""});
}

}  // namespace
}  // namespace qs::bench
