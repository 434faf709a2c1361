// Unit: the byte-level BPE tokenizer on a small hand-built tokenizer.json (all 256 bytes plus
// a few merges), so every behaviour can be stated exactly: merge order, ignore_merges, added
// tokens with lstrip/rstrip, streaming token_bytes, empty and invalid-UTF-8 input, the
// post-processor's BOS, and the errors a malformed file gets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace qs::tok {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// Ids 0..255 are the bytes; merges add "ab" (256), "abc" (257), "bc" (258), "Ġa" (259),
// "é" (260, the two bytes C3 A9 merged); "abcd" (261) is a whole-word entry with no merge
// path to it, only reachable with ignore_merges.
json toy_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["bc"] = 258;
  vocab[byte_level_encode(" a")] = 259;
  vocab[byte_level_encode("\xC3\xA9")] = 260;
  vocab["abcd"] = 261;
  json merges = json::array({"a b", "ab c", "b c", byte_level_encode(" ") + " a",
                             byte_level_encode("\xC3") + " " + byte_level_encode("\xA9")});
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", false}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array(
      {{{"id", 300}, {"content", "<s>"}, {"special", true}},
       {{"id", 301}, {"content", "<pad>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
       {{"id", 302}, {"content", "<mark>"}, {"special", false}}});
  return j;
}

std::unique_ptr<BpeTokenizer> toy(const json& j = toy_json()) {
  auto tok = load_bpe_tokenizer_json(j, "toy");
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(BpeTokenizer, MergesByRankLeftmostFirst) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  // "a b" (rank 0) beats "b c" (rank 2); otherwise this would be {'a', 258}.
  EXPECT_EQ(tok->encode("abc", false), (Ids{257}));
  EXPECT_EQ(tok->encode("bc", false), (Ids{258}));
  EXPECT_EQ(tok->encode("abab", false), (Ids{256, 256}));
  EXPECT_EQ(tok->encode("abcd", false), (Ids{257, 'd'}));  // no merge reaches "abcd"
  // Pieces "x", " abc": inside " abc", "a b" (rank 0) wins over " a" (rank 3) for the 'a'.
  EXPECT_EQ(tok->encode("x abc", false), (Ids{'x', ' ', 257}));
  EXPECT_EQ(tok->encode(" ax", false), (Ids{259, 'x'}));
}

TEST(BpeTokenizer, IgnoreMergesMapsWholeWords) {
  json j = toy_json();
  j["model"]["ignore_merges"] = true;
  auto tok = toy(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("abcd", false), (Ids{261}));
  EXPECT_EQ(tok->encode("abc", false), (Ids{257}));
}

TEST(BpeTokenizer, EmptyText) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->encode("", false).empty());
  EXPECT_TRUE(tok->encode("", true).empty());  // no post-processor: nothing to add
  EXPECT_EQ(tok->decode({}, false), "");
}

TEST(BpeTokenizer, TokenBytesAreStreamingSafe) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  // "ü" (C3 BC) has no merged token, so its two bytes come out as two tokens; each token's
  // bytes are half a character, and only together are they text.
  const Ids ids = tok->encode("\xC3\xBC", false);
  ASSERT_EQ(ids, (Ids{0xC3, 0xBC}));
  EXPECT_EQ(tok->token_bytes(ids[0]), "\xC3");
  EXPECT_EQ(tok->token_bytes(ids[1]), "\xBC");
  EXPECT_EQ(tok->token_bytes(ids[0]) + tok->token_bytes(ids[1]), "\xC3\xBC");
  EXPECT_EQ(tok->decode({ids[0]}, false), "\xEF\xBF\xBD");  // half a character alone
  EXPECT_EQ(tok->decode(ids, false), "\xC3\xBC");
  // A merged multi-byte token gives raw bytes, not its byte-level spelling.
  EXPECT_EQ(tok->encode("\xC3\xA9", false), (Ids{260}));
  EXPECT_EQ(tok->token_bytes(260), "\xC3\xA9");
  EXPECT_EQ(tok->id_to_piece(260), "\xC3\x83\xC2\xA9");
  EXPECT_EQ(tok->token_bytes(' '), " ");
  EXPECT_EQ(tok->id_to_piece(' '), "\xC4\xA0");
  EXPECT_EQ(tok->token_bytes(300), "<s>");
  EXPECT_EQ(tok->token_bytes(99999), "");
}

TEST(BpeTokenizer, InvalidUtf8DoesNotCrashAndRoundTripsBytes) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  const std::string bad = "ab\xFF\xC3 abc\xE2\x82";
  const Ids ids = tok->encode(bad, false);
  std::string bytes;
  for (int32_t id : ids) bytes += tok->token_bytes(id);
  EXPECT_EQ(bytes, bad);
  EXPECT_EQ(tok->decode(ids, false), "ab\xEF\xBF\xBD\xEF\xBF\xBD abc\xEF\xBF\xBD");
}

TEST(BpeTokenizer, AddedTokensSplitFirst) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("ab<s>c", false), (Ids{256, 300, 'c'}));
  // <pad> has lstrip and rstrip: it swallows the spaces around it.
  EXPECT_EQ(tok->encode("ab  <pad>  c", false), (Ids{256, 301, 'c'}));
  EXPECT_EQ(tok->encode("<s><mark><s>", false), (Ids{300, 302, 300}));
  EXPECT_EQ(tok->decode({'a', 300, 302, 'b'}, /*skip_special=*/true), "a<mark>b");
  EXPECT_EQ(tok->decode({'a', 300, 302, 'b'}, /*skip_special=*/false), "a<s><mark>b");
  EXPECT_TRUE(tok->is_special(300));
  EXPECT_FALSE(tok->is_special(302));
  EXPECT_FALSE(tok->is_special('a'));
  EXPECT_EQ(tok->piece_to_id("<pad>"), 301);
  EXPECT_EQ(tok->piece_to_id("abc"), 257);
  EXPECT_EQ(tok->piece_to_id("nope"), -1);
  EXPECT_EQ(tok->vocab_size(), 303);
}

TEST(BpeTokenizer, TemplateProcessingAddsBos) {
  json j = toy_json();
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}}}}};
  auto tok = toy(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->encode("ab", true), (Ids{300, 256}));
  EXPECT_EQ(tok->encode("ab", false), (Ids{256}));
  EXPECT_EQ(tok->encode("", true), (Ids{300}));
  ASSERT_TRUE(tok->set_add_bos(false).ok());
  EXPECT_EQ(tok->encode("ab", true), (Ids{256}));
}

TEST(BpeTokenizer, PrefixSpaceAndSplitBehaviours) {
  json j = toy_json();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto tok = toy(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("ab", false), (Ids{' ', 256}));  // " ab"
  EXPECT_EQ(tok->encode("a", false), (Ids{259}));        // " a"
  EXPECT_EQ(tok->pretokenize("ab c"), (std::vector<std::string>{" ab", " c"}));

  json s = toy_json();
  s["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "MergedWithPrevious"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto split = toy(s);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->pretokenize("the-final--countdown"),
            (std::vector<std::string>{"the-", "final-", "-", "countdown"}));
}

TEST(BpeTokenizer, MalformedFilesGetErrors) {
  json j = toy_json();
  j["model"]["merges"].push_back("a zz");
  auto r = load_bpe_tokenizer_json(j, "toy");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("\"zz\""), std::string::npos) << r.status().message();

  j = toy_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  r = load_bpe_tokenizer_json(j, "toy");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);

  j = toy_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}};
  r = load_bpe_tokenizer_json(j, "toy");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  j = toy_json();
  j["model"]["vocab"]["dup"] = 5;  // id 5 is already a byte
  r = load_bpe_tokenizer_json(j, "toy");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);

  j = toy_json();
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(load_bpe_tokenizer_json(j, "toy").status().code(), StatusCode::kUnimplemented);

  EXPECT_FALSE(load_bpe_tokenizer_json(json::array(), "toy").ok());
  EXPECT_EQ(load_bpe_tokenizer_json_file("/nonexistent/tokenizer.json").ok(), false);
}

TEST(BpeTokenizer, SetSpecialTokens) {
  auto tok = toy();
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->set_add_bos(true).ok());  // no BOS yet
  EXPECT_EQ(tok->set_bos_token("<nope>").code(), StatusCode::kNotFound);
  ASSERT_TRUE(tok->set_bos_token("<s>").ok());
  ASSERT_TRUE(tok->set_eos_token("<pad>").ok());
  ASSERT_TRUE(tok->set_add_bos(true).ok());
  ASSERT_TRUE(tok->set_add_eos(true).ok());
  EXPECT_EQ(tok->encode("c", true), (Ids{300, 'c', 301}));
  EXPECT_EQ(tok->eos_id(), 301);
}

}  // namespace
}  // namespace qs::tok
