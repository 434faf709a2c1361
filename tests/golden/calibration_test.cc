// golden: calibration sampling (quant/calibration.h) with the shipped stories260K tokenizer:
// samples are exactly seqlen tokens, start with BOS, are prefixes of whole documents while
// long documents last and concatenated chunks after, are reproducible from the seed and change
// with it; .txt and .jsonl documents read as documented, and bad datasets are errors naming
// the file (and line).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "quant/calibration.h"
#include "tokenizer/tokenizer.h"

namespace qs::quant {
namespace {

namespace fs = std::filesystem;

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/stories260K";

std::unique_ptr<tok::Tokenizer> tokenizer() {
  auto t = tok::load_tokenizer(kModelDir);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string temp_file(const std::string& name, const std::string& contents) {
  const fs::path p = fs::temp_directory_path() / ("qs_calib_" + std::to_string(getpid()) + name);
  std::ofstream(p) << contents;
  return p.string();
}

TEST(Calibration, SamplesFromTheShippedText) {
  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  auto docs = read_calibration_documents(default_calibration_dataset());
  ASSERT_TRUE(docs.ok()) << docs.status().to_string();
  EXPECT_EQ(docs->size(), 118u);  // c4.utf8: one document per line
  CalibrationOptions o;
  o.nsamples = 40;
  o.seqlen = 512;
  auto set = sample_calibration(*tok, *docs, o, "c4");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ(set->samples.size(), 40u);
  EXPECT_EQ(set->n_whole + set->n_concatenated, 40);
  EXPECT_GT(set->n_whole, 0);
  for (const auto& s : set->samples) {
    ASSERT_EQ(s.size(), 512u);
    EXPECT_EQ(s[0], tok->bos_id());
  }
  // Whole-document samples are prefixes of some document's own tokenization.
  std::vector<std::vector<int32_t>> encoded;
  for (const std::string& d : *docs) encoded.push_back(tok->encode(d, true));
  for (int64_t i = 0; i < set->n_whole; ++i) {
    const auto& s = set->samples[i];
    EXPECT_TRUE(std::any_of(encoded.begin(), encoded.end(),
                            [&](const std::vector<int32_t>& ids) {
                              return ids.size() >= s.size() &&
                                     std::equal(s.begin(), s.end(), ids.begin());
                            }))
        << "sample " << i;
  }
  auto again = sample_calibration(*tok, *docs, o, "c4");
  EXPECT_EQ(again->samples, set->samples);
  o.seed = 7;
  auto other = sample_calibration(*tok, *docs, o, "c4");
  EXPECT_NE(other->samples, set->samples);
  // Long enough samples come whole; asking for more than there is gives what there is.
  o.seqlen = 64;
  o.nsamples = 100000;
  auto all = sample_calibration(*tok, *docs, o, "c4");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->n_whole, 118);
  EXPECT_LT(static_cast<int64_t>(all->samples.size()), o.nsamples);
}

TEST(Calibration, ReadsTxtAndJsonlAndRejectsBadInput) {
  const std::string txt = temp_file("a.txt", "first document\n\n  \nsecond document\r\n");
  auto docs = read_calibration_documents(txt);
  ASSERT_TRUE(docs.ok());
  EXPECT_EQ(*docs, (std::vector<std::string>{"first document", "second document"}));
  const std::string jsonl =
      temp_file("b.jsonl", "{\"text\": \"one\\ntwo\"}\n\n{\"text\": \"three\", \"id\": 3}\n");
  docs = read_calibration_documents(jsonl);
  ASSERT_TRUE(docs.ok());
  EXPECT_EQ(*docs, (std::vector<std::string>{"one\ntwo", "three"}));
  const std::string bad = temp_file("c.jsonl", "{\"text\": \"ok\"}\n{\"content\": \"x\"}\n");
  docs = read_calibration_documents(bad);
  ASSERT_FALSE(docs.ok());
  EXPECT_NE(docs.status().message().find(bad + ":2"), std::string::npos);
  const std::string empty = temp_file("d.txt", "");
  EXPECT_FALSE(read_calibration_documents(empty).ok());
  EXPECT_FALSE(read_calibration_documents(empty + ".missing").ok());

  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  CalibrationOptions o;
  o.seqlen = 4096;
  auto set = sample_calibration(*tok, {"a short story.", "another one."}, o, "tiny");
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("shorter than one calibration sample of 4096"),
            std::string::npos)
      << set.status().message();
  EXPECT_FALSE(sample_calibration(*tok, {}, o, "none").ok());
  for (const auto& f : {txt, jsonl, bad, empty}) fs::remove(f);
}

// Pre-tokenized samples (what the auto-round comparison feeds both tools): taken in file order,
// short records skipped, long ones cut; text files are not mistaken for them; bad ids are
// errors naming the line.
TEST(Calibration, ReadsPreTokenizedSamples) {
  CalibrationOptions o;
  o.nsamples = 2;
  o.seqlen = 3;
  const std::string ids = temp_file(
      "e.jsonl",
      "{\"input_ids\": [1, 5, 6, 7]}\n{\"input_ids\": [1, 2]}\n\n{\"input_ids\": [1, 9, 8]}\n"
      "{\"input_ids\": [1, 4, 4]}\n");
  auto set = read_token_calibration(ids, o, 16);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_TRUE(set->has_value());
  EXPECT_EQ((*set)->samples, (std::vector<std::vector<int32_t>>{{1, 5, 6}, {1, 9, 8}}));
  EXPECT_EQ((*set)->n_documents, 4);

  const std::string text = temp_file("f.jsonl", "{\"text\": \"a story\"}\n");
  set = read_token_calibration(text, o, 16);
  ASSERT_TRUE(set.ok());
  EXPECT_FALSE(set->has_value());
  set = read_token_calibration(temp_file("g.txt", "[1, 2, 3]\n"), o, 16);
  ASSERT_TRUE(set.ok());
  EXPECT_FALSE(set->has_value());

  for (const char* body :
       {"{\"input_ids\": [1, 2, 99]}\n", "{\"input_ids\": [1, -2, 3]}\n",
        "{\"input_ids\": [1, 2.5, 3]}\n", "{\"input_ids\": [1, 2, 3]}\n{\"text\": \"x\"}\n"}) {
    set = read_token_calibration(temp_file("h.jsonl", body), o, 16);
    ASSERT_FALSE(set.ok()) << body;
    EXPECT_NE(set.status().message().find("h.jsonl:"), std::string::npos) << set.status().message();
  }
  set = read_token_calibration(temp_file("i.jsonl", "{\"input_ids\": [1, 2]}\n"), o, 16);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("shorter than one calibration sample of 3 tokens"),
            std::string::npos)
      << set.status().message();
}

}  // namespace
}  // namespace qs::quant
