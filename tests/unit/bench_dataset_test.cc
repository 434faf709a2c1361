// bench: ShareGPT filtering and sampling as vLLM's ShareGPTDataset, on a committed fixture
// whose entries each sit on one side of one rule (counted in words), and on the shared
// ShareGPT sample with a real tokenizer; random prompts with the lengths vLLM asks for.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "bench_client/dataset.h"

namespace qs::bench {
namespace {

namespace fs = std::filesystem;

const std::string kFixture =
    std::string(QS_SOURCE_DIR) + "/tests/unit/fixtures/bench/sharegpt_small.json";
const std::string kStoriesDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";

int64_t count_words(const std::string& s) {
  std::istringstream in(s);
  int64_t n = 0;
  for (std::string w; in >> w;) ++n;
  return n;
}

using Lens = std::multiset<std::pair<int64_t, int64_t>>;

Lens lens_of(const std::vector<SampleRequest>& v) {
  Lens out;
  for (const auto& r : v) out.insert({r.prompt_len, r.expected_output_len});
  return out;
}

TEST(BenchDataset, IsValidSequenceBoundaries) {
  EXPECT_TRUE(is_valid_sequence(4, 4, false));
  EXPECT_FALSE(is_valid_sequence(3, 4, false));
  EXPECT_FALSE(is_valid_sequence(4, 3, false));
  EXPECT_TRUE(is_valid_sequence(4, 3, true));
  EXPECT_FALSE(is_valid_sequence(3, 100, true));
  EXPECT_TRUE(is_valid_sequence(1024, 1024, false));
  EXPECT_FALSE(is_valid_sequence(1025, 10, false));
  EXPECT_FALSE(is_valid_sequence(1000, 1049, false));
}

TEST(BenchDataset, ReadsFirstTwoTurnsOfEntriesWithTwoOrMore) {
  auto convs = read_sharegpt(kFixture);
  ASSERT_TRUE(convs.ok()) << convs.status().message();
  // 10 entries; one has a single turn and one has no conversations.
  ASSERT_EQ(convs->size(), 8u);
  EXPECT_EQ(count_words((*convs)[0].first), 10);
  EXPECT_EQ(count_words((*convs)[0].second), 20);
  EXPECT_EQ(count_words(convs->back().first), 6);  // the third turn is not used
  EXPECT_EQ(count_words(convs->back().second), 5);
}

TEST(BenchDataset, ShareGptFilterKeepsExactlyTheValidPairs) {
  auto convs = read_sharegpt(kFixture);
  ASSERT_TRUE(convs.ok());
  ShareGptOptions o;
  o.num_prompts = 100;
  o.oversample = false;
  const auto out = sample_sharegpt(*convs, count_words, o);
  EXPECT_EQ(lens_of(out), (Lens{{10, 20}, {4, 4}, {1024, 1024}, {6, 5}}));
  for (const auto& r : out) EXPECT_EQ(count_words(r.prompt), r.prompt_len);
}

TEST(BenchDataset, FixedOutputLenSkipsOnlyTheMinOutputCheck) {
  auto convs = read_sharegpt(kFixture);
  ASSERT_TRUE(convs.ok());
  ShareGptOptions o;
  o.num_prompts = 100;
  o.oversample = false;
  o.output_len = 2;
  // Now the 3-word reply and the 1000+1049 pair pass; short and long prompts still do not.
  EXPECT_EQ(lens_of(sample_sharegpt(*convs, count_words, o)),
            (Lens{{10, 2}, {10, 2}, {1000, 2}, {4, 2}, {1024, 2}, {6, 2}}));
}

TEST(BenchDataset, TakesNumPromptsAndOversamplesWhenShort) {
  auto convs = read_sharegpt(kFixture);
  ASSERT_TRUE(convs.ok());
  ShareGptOptions o;
  o.num_prompts = 2;
  EXPECT_EQ(sample_sharegpt(*convs, count_words, o).size(), 2u);
  o.num_prompts = 11;
  const auto out = sample_sharegpt(*convs, count_words, o);
  ASSERT_EQ(out.size(), 11u);
  const Lens valid{{10, 20}, {4, 4}, {1024, 1024}, {6, 5}};
  for (const auto& r : out) EXPECT_EQ(valid.count({r.prompt_len, r.expected_output_len}), 1u);
}

TEST(BenchDataset, SeedDecidesTheOrder) {
  auto convs = read_sharegpt(kFixture);
  ASSERT_TRUE(convs.ok());
  ShareGptOptions o;
  o.num_prompts = 4;
  o.oversample = false;
  auto prompts = [&](uint64_t seed) {
    o.seed = seed;
    std::vector<std::string> p;
    for (const auto& r : sample_sharegpt(*convs, count_words, o)) p.push_back(r.prompt);
    return p;
  };
  EXPECT_EQ(prompts(5), prompts(5));
  std::set<std::vector<std::string>> orders;
  for (uint64_t s = 0; s < 10; ++s) orders.insert(prompts(s));
  EXPECT_GT(orders.size(), 1u);
}

TEST(BenchDataset, UnreadableOrMalformedFilesAreErrors) {
  EXPECT_FALSE(read_sharegpt("/nonexistent/sharegpt.json").ok());
  const fs::path tmp = fs::temp_directory_path() / "qs_bench_bad_sharegpt.json";
  for (const char* text :
       {"{\"not\": \"a list\"}", "[1, 2]", "[{\"conversations\": [{}, {}]}]", "not json"}) {
    { std::ofstream(tmp) << text; }
    EXPECT_FALSE(read_sharegpt(tmp.string()).ok()) << text;
  }
  fs::remove(tmp);
}

TEST(BenchDataset, SharedShareGptSampleWithRealTokenizer) {
  const std::string path = std::string(QS_SHARED_DATA_DIR) + "/bench/sharegpt/sharegpt_sample.json";
  // The sample's prompts are about 1000 tokens long in a ~150k vocabulary (its prompt_tokens
  // field), so Qwen2's tokenizer puts them on both sides of the 1024 limit (Llama-2's 32k
  // vocabulary puts every one above it).
  const std::string tok_dir = std::string(QS_SHARED_DATA_DIR) + "/tokenizers/qwen2";
  if (!fs::exists(path)) GTEST_SKIP() << "missing " << path;
  if (!fs::exists(tok_dir + "/vocab.json")) GTEST_SKIP() << "missing " << tok_dir;
  auto tok = tok::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto count = [&](const std::string& s) {
    return static_cast<int64_t>((*tok)->encode(s, true).size());
  };
  auto convs = read_sharegpt(path);
  ASSERT_TRUE(convs.ok()) << convs.status().message();
  EXPECT_EQ(convs->size(), 50u);  // SOURCES.md: 50 two-turn records
  int64_t n_valid = 0;
  for (const auto& [p, c] : *convs) n_valid += is_valid_sequence(count(p), count(c), false);
  ASSERT_GT(n_valid, 0);
  ASSERT_LT(n_valid, 50);  // some are pruned
  ShareGptOptions o;
  o.num_prompts = 1000;
  o.oversample = false;
  const auto out = sample_sharegpt(*convs, count, o);
  EXPECT_EQ(static_cast<int64_t>(out.size()), n_valid);
  for (const auto& r : out) {
    EXPECT_EQ(r.prompt_len, count(r.prompt));
    EXPECT_TRUE(is_valid_sequence(r.prompt_len, r.expected_output_len, false));
  }
}

class BenchRandomDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tok::load_tokenizer(kStoriesDir);
    ASSERT_TRUE(t.ok()) << t.status().message();
    tok_ = std::move(*t);
  }
  std::unique_ptr<tok::Tokenizer> tok_;
};

TEST_F(BenchRandomDataset, FixedLengthsMatchTheTargetAfterReencoding) {
  RandomOptions o;
  o.num_prompts = 20;
  o.input_len = 32;
  o.output_len = 16;
  auto out = sample_random(*tok_, o);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 20u);
  // stories260K adds BOS, so the prompt text carries input_len - 1 tokens.
  const int64_t target = 31;
  int64_t exact = 0;
  for (const auto& r : *out) {
    EXPECT_EQ(r.expected_output_len, 16);
    EXPECT_EQ(r.prompt_len, static_cast<int64_t>(tok_->encode(r.prompt, false).size()));
    EXPECT_NEAR(r.prompt_len, target, 2);  // 10 decode rounds may leave a token or two
    exact += r.prompt_len == target;
  }
  EXPECT_GE(exact, 15);
}

TEST_F(BenchRandomDataset, RangeRatioSpreadsLengthsWithinBounds) {
  RandomOptions o;
  o.num_prompts = 200;
  o.input_len = 41;    // 40 after BOS: [20, 60]
  o.output_len = 100;  // [50, 150]
  o.range_ratio = 0.5;
  o.seed = 3;
  auto out = sample_random(*tok_, o);
  ASSERT_TRUE(out.ok()) << out.status().message();
  int64_t lo_out = 1 << 30, hi_out = 0, lo_in = 1 << 30, hi_in = 0;
  for (const auto& r : *out) {
    lo_out = std::min(lo_out, r.expected_output_len);
    hi_out = std::max(hi_out, r.expected_output_len);
    lo_in = std::min(lo_in, r.prompt_len);
    hi_in = std::max(hi_in, r.prompt_len);
  }
  EXPECT_GE(lo_out, 50);
  EXPECT_LE(hi_out, 150);
  EXPECT_LT(lo_out, 60);  // 200 uniform draws reach near both ends
  EXPECT_GT(hi_out, 140);
  EXPECT_GE(lo_in, 20 - 2);
  EXPECT_LE(hi_in, 60 + 2);
  EXPECT_LT(lo_in, 26);
  EXPECT_GT(hi_in, 54);
}

TEST_F(BenchRandomDataset, SharedPrefixAndSeeds) {
  RandomOptions o;
  o.num_prompts = 5;
  o.input_len = 20;
  o.prefix_len = 12;
  auto a = sample_random(*tok_, o), b = sample_random(*tok_, o);
  o.seed = 9;
  auto c = sample_random(*tok_, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].prompt, (*b)[i].prompt);
  EXPECT_NE((*a)[0].prompt, (*c)[0].prompt);
  // Every prompt opens with the same prefix text; different offsets make the rest differ.
  const std::string head = (*a)[0].prompt.substr(0, 8);
  for (const auto& r : *a) EXPECT_EQ(r.prompt.substr(0, 8), head);
  EXPECT_NE((*a)[0].prompt, (*a)[1].prompt);
  for (const auto& r : *a) EXPECT_NEAR(r.prompt_len, 12 + 19, 2);
}

TEST_F(BenchRandomDataset, RejectsBadRatiosAndEmptyPrompts) {
  RandomOptions o;
  o.num_prompts = 1;
  o.range_ratio = 1.0;
  EXPECT_FALSE(sample_random(*tok_, o).ok());
  o.range_ratio = 0.0;
  o.input_len = 1;  // only the BOS: nothing left to sample
  EXPECT_FALSE(sample_random(*tok_, o).ok());
}

}  // namespace
}  // namespace qs::bench
