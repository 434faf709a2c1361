// tests: StopChecker: which token ids stop, where a stop string cuts the text, which
// occurrence wins, and how much of the tail is held back while streaming.
#include <gtest/gtest.h>

#include "engine/stop_checker.h"

namespace qs {
namespace {

TEST(StopCheckerTest, EosAndStopTokenIds) {
  SamplingParams p;
  p.stop_token_ids = {7, 9};
  StopChecker c(p, {2, 5});
  EXPECT_TRUE(c.is_eos(2));
  EXPECT_TRUE(c.is_eos(5));
  EXPECT_FALSE(c.is_eos(7));
  EXPECT_TRUE(c.is_stop_token_id(9));
  EXPECT_TRUE(c.stops_on(5));
  EXPECT_TRUE(c.stops_on(7));
  EXPECT_FALSE(c.stops_on(3));
  p.ignore_eos = true;
  StopChecker ignoring(p, {2, 5});
  EXPECT_FALSE(ignoring.stops_on(2));
  EXPECT_TRUE(ignoring.stops_on(7));  // stop_token_ids still apply, as in vLLM
}

TEST(StopCheckerTest, CutsBeforeOrAfterTheStopString) {
  SamplingParams p;
  p.stop = {"END"};
  StopChecker before(p, {});
  auto m = before.find_stop_string("abc END xyz", 11);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->text_end, 4u);
  EXPECT_EQ(m->stop, "END");
  p.include_stop_str_in_output = true;
  StopChecker after(p, {});
  m = after.find_stop_string("abc END xyz", 11);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->text_end, 7u);
}

TEST(StopCheckerTest, OnlyMatchesTouchingNewText) {
  SamplingParams p;
  p.stop = {"END"};
  StopChecker c(p, {});
  EXPECT_FALSE(c.find_stop_string("END then more", 4));  // searched on an earlier step
  EXPECT_FALSE(c.find_stop_string("xxEND", 0));
  auto m = c.find_stop_string("xxEND", 1);  // the "D" completes it
  ASSERT_TRUE(m);
  EXPECT_EQ(m->text_end, 2u);
}

TEST(StopCheckerTest, EarliestOccurrenceWinsThenListOrder) {
  SamplingParams p;
  p.stop = {"world", "lo w", "lo"};
  StopChecker c(p, {});
  auto m = c.find_stop_string("hello world", 11);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->stop, "lo w");  // starts at 3 like "lo"; listed first
  EXPECT_EQ(m->text_end, 3u);
}

TEST(StopCheckerTest, HoldsBackTheLongestPossibleStopPrefix) {
  SamplingParams p;
  p.stop = {"STOP", "<|end|>"};
  StopChecker c(p, {});
  EXPECT_EQ(c.holdback("Hello"), 0u);
  EXPECT_EQ(c.holdback("Hello S"), 1u);
  EXPECT_EQ(c.holdback("Hello STO"), 3u);
  EXPECT_EQ(c.holdback("Hello <|en"), 4u);
  EXPECT_EQ(c.holdback("ST"), 2u);
  EXPECT_EQ(c.holdback(""), 0u);
  EXPECT_EQ(c.holdback("STOP"), 0u);  // whole stop strings are found, not held
  p.include_stop_str_in_output = true;
  StopChecker keep(p, {});
  EXPECT_EQ(keep.holdback("Hello STO"), 0u);
}

TEST(StopCheckerTest, MultiByteStopString) {
  SamplingParams p;
  p.stop = {"\xE3\x80\x82"};  // "。"
  StopChecker c(p, {});
  auto m = c.find_stop_string("\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\xE5\x86\x8D", 6);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->text_end, 6u);
}

}  // namespace
}  // namespace qs
