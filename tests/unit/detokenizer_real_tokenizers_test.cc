// tests: streaming detokenization and stop strings with the real tokenizers in
// shared/data/tokenizers (Qwen2 byte-level BPE, Llama-2 SentencePiece with byte fallback):
// characters split over byte tokens come out whole, SPM spaces match the full decode, and
// the streamed pieces add up to what decoding prompt + output adds to the prompt's text.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../common/shared_data.h"
#include "detokenizer_test_tokenizer.h"
#include "engine/detokenizer.h"
#include "engine/output_processor.h"
#include "tokenizer/tokenizer.h"

namespace qs {
namespace {

// Every test here reads the shared data.
QS_SHARED_DATA_FOR_ALL_TESTS("tokenizers");

const std::vector<std::string> kTexts = {
    "Hello world! caf\xC3\xA9 \xF0\x9F\x98\x80 na\xC3\xAFve",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 \xF0\x9F\xA6\x9C"
    "\xF0\x9F\xA7\xAC family \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F"
    "\x91\xA7",
    "  leading spaces and\nnewlines\t tabs  ",
    "\xF0\x9D\x94\x98\xF0\x9D\x94\xAB\xF0\x9D\x94\xA6\xF0\x9D\x94\xA0 \xE2\x84\xA6\xE2\x89\x88"
    "\xC3\xA7\xE2\x88\x9A\xE2\x88\xAB",
};

std::unique_ptr<tok::Tokenizer> load(const std::string& name) {
  auto t = tok::load_tokenizer(::qs::testing::shared_data_dir() + "/tokenizers/" + name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

bool whole_utf8(const std::string& s) {
  return testing::replace_invalid_utf8(s) == s;
}

class RealTokenizerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RealTokenizerTest, StreamedPiecesAreWholeAndAddUpToTheDecode) {
  const auto tok = load(GetParam());
  ASSERT_TRUE(tok);
  const std::vector<int32_t> prompt = tok->encode("Say something:", true);
  int n_split_chars = 0;  // tokens whose bytes are part of a character
  for (const auto& text : kTexts) {
    const std::vector<int32_t> output = tok->encode(text, false);
    IncrementalDetokenizer d(*tok, prompt, /*skip_special_tokens=*/true);
    std::string streamed;
    for (int32_t id : output) {
      const std::string piece = d.append(id);
      EXPECT_TRUE(whole_utf8(piece)) << "token " << id;
      if (!whole_utf8(tok->token_bytes(id))) ++n_split_chars;
      streamed += piece;
    }
    streamed += d.flush();
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    const std::string prompt_text = tok->decode(prompt, true);
    const std::string full = tok->decode(all, true);
    ASSERT_EQ(full.compare(0, prompt_text.size(), prompt_text), 0);
    EXPECT_EQ(streamed, full.substr(prompt_text.size())) << text;
  }
  EXPECT_GT(n_split_chars, 0) << "no character was split over tokens; the test proves little";
}

TEST_P(RealTokenizerTest, StopStringAcrossTokensIsCut) {
  const auto tok = load(GetParam());
  ASSERT_TRUE(tok);
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"42."};
  const std::vector<int32_t> output = tok->encode("The answer is 42. Done", false);
  OutputProcessor op(*tok, p, tok->encode("Q:", true), {tok->eos_id()});
  std::string streamed;
  for (int32_t id : output) {
    const StepOutput step = op.append(id);
    EXPECT_EQ(step.text.find('4'), std::string::npos) << "streamed part of the stop string";
    streamed += step.text;
    if (step.finished) break;
  }
  EXPECT_TRUE(op.finished());
  EXPECT_EQ(op.finish_reason(), "stop");
  EXPECT_EQ(op.stop_string(), "42.");
  EXPECT_EQ(streamed, op.text());
  // Byte-level BPE keeps the prompt's separation; SPM starts the word with its own space.
  EXPECT_TRUE(op.text() == "The answer is " || op.text() == " The answer is ") << op.text();
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, RealTokenizerTest, ::testing::Values("qwen2", "llama2"));

}  // namespace
}  // namespace qs
