// tests: OutputProcessor end to end over an in-memory tokenizer: finish reasons, stop
// strings across tokens (held back, then cut or kept), stop tokens kept out of the text,
// and, over random outputs, pieces that are whole characters and add up to text().
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "detokenizer_test_tokenizer.h"
#include "engine/output_processor.h"

namespace qs {
namespace {

using testing::FakeTokenizer;

enum : int32_t {
  kEos = 0,
  kHello,  // "Hello"
  kSpace,  // " "
  kSt,     // "ST"
  kOp,     // "OP"
  kBang,   // "!"
  kAb,     // "ab"
  kF0,     // 😀 = F0 9F 98 80 in four byte tokens
  k9F,
  k98,
  k80,
  kXStopY,  // "xSTOPy"
  kImEnd,   // "<|im_end|>", special
};

FakeTokenizer make_tokenizer() {
  return FakeTokenizer({"<eos>", "Hello", " ", "ST", "OP", "!", "ab", "\xF0", "\x9F", "\x98",
                        "\x80", "xSTOPy", "<|im_end|>"},
                       {kEos, kImEnd}, /*spm=*/false, kEos);
}

struct Streamed {
  std::vector<std::string> pieces;
  std::string joined;
  StepOutput last;
};

Streamed feed(OutputProcessor& op, const std::vector<int32_t>& ids) {
  Streamed r;
  for (int32_t id : ids) {
    EXPECT_FALSE(op.finished());
    r.last = op.append(id);
    r.pieces.push_back(r.last.text);
    r.joined += r.last.text;
    if (r.last.finished) break;
  }
  return r;
}

SamplingParams params_with_stop(std::vector<std::string> stop) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = std::move(stop);
  return p;
}

TEST(OutputProcessorTest, StopStringSpanningTwoTokensIsHeldThenCut) {
  const auto tok = make_tokenizer();
  OutputProcessor op(tok, params_with_stop({"STOP"}), {kHello}, {kEos});
  const Streamed r = feed(op, {kSpace, kHello, kSpace, kSt, kOp, kBang});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{" ", "Hello", " ", "", ""}));
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(op.text(), " Hello ");
  EXPECT_EQ(r.joined, op.text());
  EXPECT_EQ(op.stop_string(), "STOP");
  EXPECT_FALSE(op.stop_token_id());
  EXPECT_EQ(op.output_ids().size(), 5u);
}

TEST(OutputProcessorTest, IncludeStopStringKeepsItAndHoldsNothing) {
  const auto tok = make_tokenizer();
  auto p = params_with_stop({"STOP"});
  p.include_stop_str_in_output = true;
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kSt, kOp});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"Hello", "ST", "OP"}));
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(op.text(), "HelloSTOP");
}

TEST(OutputProcessorTest, HeldTextIsReleasedWhenItCannotBecomeAStop) {
  const auto tok = make_tokenizer();
  OutputProcessor op(tok, params_with_stop({"STOP"}), {}, {kEos});
  const Streamed r = feed(op, {kSt, kAb, kSt});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"", "STab", ""}));
  EXPECT_FALSE(op.finished());
  EXPECT_EQ(op.text(), "STabST");  // the full text so far, held tail included
}

TEST(OutputProcessorTest, StopStringInsideOneToken) {
  const auto tok = make_tokenizer();
  OutputProcessor op(tok, params_with_stop({"STOP"}), {}, {kEos});
  const Streamed r = feed(op, {kAb, kXStopY});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"ab", "x"}));
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(op.text(), "abx");
}

TEST(OutputProcessorTest, EosStopsAndStaysOutOfTheText) {
  const auto tok = make_tokenizer();
  SamplingParams p;
  p.skip_special_tokens = false;  // even when special tokens would be printed
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kEos});
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(op.text(), "Hello");
  EXPECT_FALSE(op.stop_token_id());  // vLLM reports no stop_reason for EOS
  EXPECT_FALSE(op.stop_string());
  EXPECT_EQ(op.output_ids(), (std::vector<int32_t>{kHello, kEos}));
}

TEST(OutputProcessorTest, IgnoreEosRunsToMaxTokens) {
  const auto tok = make_tokenizer();
  SamplingParams p;
  p.ignore_eos = true;
  p.max_tokens = 3;
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kEos, kBang});
  EXPECT_EQ(r.last.finish_reason, "length");
  EXPECT_EQ(op.text(), "Hello!");  // the special EOS is skipped in the text
}

TEST(OutputProcessorTest, StopTokenIdsReportTheToken) {
  const auto tok = make_tokenizer();
  SamplingParams p;
  p.stop_token_ids = {kBang};
  {
    OutputProcessor op(tok, p, {}, {kEos});
    const Streamed r = feed(op, {kHello, kBang});
    EXPECT_EQ(r.last.finish_reason, "stop");
    EXPECT_EQ(op.text(), "Hello");
    EXPECT_EQ(op.stop_token_id(), kBang);
  }
  p.include_stop_str_in_output = true;
  {
    OutputProcessor op(tok, p, {}, {kEos});
    feed(op, {kHello, kBang});
    EXPECT_EQ(op.text(), "Hello!");
  }
}

TEST(OutputProcessorTest, MaxTokensReleasesHeldText) {
  const auto tok = make_tokenizer();
  auto p = params_with_stop({"STOP"});
  p.max_tokens = 2;
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kSt});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"Hello", "ST"}));
  EXPECT_EQ(r.last.finish_reason, "length");
}

TEST(OutputProcessorTest, StopStringOnTheLastTokenBeatsLength) {
  const auto tok = make_tokenizer();
  auto p = params_with_stop({"STOP"});
  p.max_tokens = 3;
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kSt, kOp});
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(op.text(), "Hello");
}

TEST(OutputProcessorTest, IncompleteCharacterAtTheEndIsFlushed) {
  const auto tok = make_tokenizer();
  SamplingParams p;
  p.max_tokens = 3;
  OutputProcessor op(tok, p, {}, {kEos});
  const Streamed r = feed(op, {kHello, kF0, k9F});
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"Hello", "", "\xEF\xBF\xBD"}));
  EXPECT_EQ(r.joined, op.text());
}

TEST(OutputProcessorTest, FinishFromOutsideReleasesHeldText) {
  const auto tok = make_tokenizer();
  OutputProcessor op(tok, params_with_stop({"STOP"}), {}, {kEos});
  feed(op, {kHello, kSt});
  const StepOutput out = op.finish("length");
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_EQ(out.text, "ST");
  EXPECT_EQ(op.text(), "HelloST");
}

// Over random outputs: every piece is whole UTF-8, the pieces add up to text(), text() is
// a prefix of the decoded output, and a stop string ends it exactly where the decode has one.
TEST(OutputProcessorTest, RandomOutputsKeepTheStreamingInvariants) {
  const auto tok = make_tokenizer();
  const std::vector<std::vector<int32_t>> groups = {
      {kHello},  {kSpace}, {kSt}, {kOp}, {kBang}, {kAb}, {kF0, k9F, k98, k80},
      {kXStopY}, {kImEnd}, {kEos}};
  const std::vector<std::vector<std::string>> stop_sets = {
      {}, {"STOP"}, {"Hello ab"}, {"\xF0\x9F\x98\x80!", "b S"}, {"ST", "TOP", "!!"}};
  std::mt19937 rng(2024);
  int n_stopped_by_string = 0;
  for (int trial = 0; trial < 400; ++trial) {
    SamplingParams p;
    p.stop = stop_sets[trial % stop_sets.size()];
    p.include_stop_str_in_output = (trial / 5) % 2 == 1;
    p.max_tokens = 1 + static_cast<int32_t>(rng() % 40);
    std::vector<int32_t> ids;
    while (ids.size() < 60) {
      const auto& g = groups[rng() % groups.size()];
      ids.insert(ids.end(), g.begin(), g.end());
    }
    OutputProcessor op(tok, p, {kHello}, {kEos});
    std::string joined;
    size_t n_fed = 0;
    for (int32_t id : ids) {
      const StepOutput out = op.append(id);
      ++n_fed;
      ASSERT_EQ(testing::replace_invalid_utf8(out.text), out.text);
      joined += out.text;
      if (out.finished) break;
    }
    ASSERT_TRUE(op.finished());
    EXPECT_EQ(joined, op.text());
    std::vector<int32_t> fed(ids.begin(), ids.begin() + n_fed);
    const bool eos_end = fed.back() == kEos;
    if (eos_end && !p.include_stop_str_in_output) fed.pop_back();
    const std::string full = tok.decode(fed, true);
    ASSERT_EQ(full.compare(0, op.text().size(), op.text()), 0) << full << " / " << op.text();
    if (op.stop_string()) {
      ++n_stopped_by_string;
      const std::string& s = *op.stop_string();
      const size_t at =
          p.include_stop_str_in_output ? op.text().size() - s.size() : op.text().size();
      EXPECT_EQ(full.compare(at, s.size(), s), 0);
      if (!p.include_stop_str_in_output) {
        for (const auto& other : p.stop) EXPECT_EQ(op.text().find(other), std::string::npos);
      }
    } else if (!eos_end) {
      EXPECT_EQ(op.finish_reason(), "length");
      EXPECT_EQ(op.output_ids().size(), static_cast<size_t>(p.max_tokens));
    }
  }
  EXPECT_GT(n_stopped_by_string, 50);  // the property was exercised
}

}  // namespace
}  // namespace qs
