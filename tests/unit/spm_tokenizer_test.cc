// unit: SentencePieceTokenizer on small hand-made vocabularies: merge order, byte fallback,
// <unk>, user-defined pieces, normalization, added tokens (legacy and not), decode rules,
// the HF tokenizer.json form, and rejection of what it does not support.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

// "_" stands for "▁" in these tests.
std::string ws(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '_') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// <unk> <s> </s>, then (with byte_fallback) <0x00>..<0xFF> at ids 3..258, then `normal`.
SpmModel make_model(const std::vector<std::pair<std::string, float>>& normal,
                    bool byte_fallback = true) {
  SpmModel m;
  m.model_type = SpmModelType::kBpe;
  m.pieces.push_back({"<unk>", 0.0f, SpmPieceType::kUnknown});
  m.pieces.push_back({"<s>", 0.0f, SpmPieceType::kControl});
  m.pieces.push_back({"</s>", 0.0f, SpmPieceType::kControl});
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      m.pieces.push_back({name, 0.0f, SpmPieceType::kByte});
    }
  }
  for (const auto& [piece, score] : normal) m.pieces.push_back({ws(piece), score});
  m.byte_fallback = byte_fallback;
  m.normalizer_name = "identity";
  m.remove_extra_whitespaces = false;
  return m;
}

std::unique_ptr<SentencePieceTokenizer> make(const SpmModel& m, const TokenizerConfig& c = {}) {
  auto t = SentencePieceTokenizer::from_model(m, c, "test.model");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.id_to_piece(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(SpmTokenizer, HighestScoringPairMergesFirst) {
  SpmModel m = make_model({{"a", 0}, {"b", 0}, {"c", 0}, {"ab", -5}, {"bc", -1}});
  m.add_dummy_prefix = false;
  auto t = make(m);
  // Leftmost-first would give "ab" "c"; the better score of "bc" wins.
  EXPECT_EQ(pieces(*t, t->encode("abc", false)), (Pieces{"a", "bc"}));
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  SpmModel m = make_model({{"a", 0}, {"aa", -1}});
  m.add_dummy_prefix = false;
  auto t = make(m);
  EXPECT_EQ(pieces(*t, t->encode("aaa", false)), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces(*t, t->encode("aaaa", false)), (Pieces{"aa", "aa"}));
}

TEST(SpmTokenizer, MergesChainThroughNewPairs) {
  SpmModel m = make_model({{"_", 0}, {"h", 0}, {"i", 0}, {"hi", -2}, {"_hi", -3}, {"_h", -9}});
  auto t = make(m);
  // "▁hi": "hi" (-2) beats "▁h" (-9), then "▁" + "hi" -> "▁hi".
  EXPECT_EQ(pieces(*t, t->encode("hi", false)), (Pieces{ws("_hi")}));
  EXPECT_EQ(pieces(*t, t->encode("hi hi", false)), (Pieces{ws("_hi"), ws("_hi")}));
}

TEST(SpmTokenizer, ByteFallbackAndUnknown) {
  auto t = make(make_model({{"_", 0}, {"a", 0}}));
  // "é" is not a piece: its two UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(pieces(*t, t->encode("a\xC3\xA9", false)), (Pieces{ws("_"), "a", "<0xC3>", "<0xA9>"}));
  // Bytes that are not UTF-8 still encode, byte by byte, and decode back as U+FFFD.
  const std::vector<int32_t> ids = t->encode("\xFF", false);
  EXPECT_EQ(pieces(*t, ids), (Pieces{ws("_"), "<0xFF>"}));
  EXPECT_EQ(t->decode(ids, true), "\xEF\xBF\xBD");

  auto no_bytes = make(make_model({{"_", 0}, {"a", 0}}, /*byte_fallback=*/false));
  EXPECT_EQ(pieces(*no_bytes, no_bytes->encode("a\xC3\xA9", false)),
            (Pieces{ws("_"), "a", "<unk>"}));
}

TEST(SpmTokenizer, UserDefinedPiecesAreNeverSplitOrMerged) {
  SpmModel m = make_model({{"a", 0}, {"b", 0}, {"ab", -1}, {"a<", -1}});
  m.pieces.push_back({"<m>", 0.0f, SpmPieceType::kUserDefined});
  m.add_dummy_prefix = false;
  auto t = make(m);
  EXPECT_EQ(pieces(*t, t->encode("a<m>b", false)), (Pieces{"a", "<m>", "b"}));
  EXPECT_FALSE(t->is_special(t->piece_to_id("<m>")));
}

TEST(SpmTokenizer, NormalizationOptions) {
  SpmModel m = make_model({{"_", 0}, {"a", 0}, {"b", 0}});
  m.remove_extra_whitespaces = true;
  auto collapse = make(m);
  EXPECT_EQ(pieces(*collapse, collapse->encode("  a   b  ", false)),
            (Pieces{ws("_"), "a", ws("_"), "b"}));
  EXPECT_TRUE(collapse->encode("   ", false).empty());

  m.remove_extra_whitespaces = false;
  auto keep = make(m);
  EXPECT_EQ(pieces(*keep, keep->encode(" a", false)), (Pieces{ws("_"), ws("_"), "a"}));
  EXPECT_TRUE(keep->encode("", false).empty());  // no dummy prefix on empty text

  m.add_dummy_prefix = false;
  auto no_prefix = make(m);
  EXPECT_EQ(pieces(*no_prefix, no_prefix->encode("a b", false)), (Pieces{"a", ws("_"), "b"}));
}

TEST(SpmTokenizer, BosEosFromModelAndConfig) {
  const SpmModel m = make_model({{"_", 0}, {"a", 0}, {"_a", -1}});
  auto t = make(m);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->bos_token(), "<s>");
  EXPECT_EQ(t->encode("a", true), (std::vector<int32_t>{1, t->piece_to_id(ws("_a"))}));
  EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));

  TokenizerConfig c;
  c.add_bos_token = false;
  c.add_eos_token = true;
  auto t2 = make(m, c);
  EXPECT_EQ(t2->encode("a", true), (std::vector<int32_t>{t2->piece_to_id(ws("_a")), 2}));
  EXPECT_EQ(t2->encode("a", false), (std::vector<int32_t>{t2->piece_to_id(ws("_a"))}));

  TokenizerConfig bad;
  bad.bos_token = AddedToken{-1, "<nope>", true};
  auto r = SentencePieceTokenizer::from_model(m, bad, "dir/tokenizer.model");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("<nope>"), std::string::npos);
  EXPECT_NE(r.status().message().find("dir/tokenizer.model"), std::string::npos);
}

TEST(SpmTokenizer, SpecialTokensInTextLegacyAndNot) {
  const SpmModel m = make_model({{"_", 0}, {"a", 0}, {"_a", -1}});
  auto legacy = make(m);
  const int32_t a = legacy->piece_to_id("a"), wa = legacy->piece_to_id(ws("_a"));
  // legacy=True (the default): every run of text gets the dummy prefix.
  EXPECT_EQ(legacy->encode("a</s>a", false), (std::vector<int32_t>{wa, 2, wa}));
  EXPECT_EQ(legacy->encode("<s>a", false), (std::vector<int32_t>{1, wa}));

  TokenizerConfig c;
  c.legacy = false;
  auto modern = make(m, c);
  EXPECT_EQ(modern->encode("a</s>a", false), (std::vector<int32_t>{wa, 2, a}));
  EXPECT_EQ(modern->encode("<s>a", false), (std::vector<int32_t>{1, a}));

  // Added tokens from added_tokens_decoder, with rstrip, and an id past the model's pieces.
  TokenizerConfig added;
  const int32_t n = static_cast<int32_t>(m.pieces.size());
  added.added_tokens = {{n, "<|im|>", true, false, true, false, false},
                        {n + 1, "<x>", false, false, false, false, true}};
  auto t = make(m, added);
  EXPECT_EQ(t->vocab_size(), n + 2);
  EXPECT_EQ(t->encode("<|im|>  a<x>", false), (std::vector<int32_t>{n, wa, n + 1}));
  EXPECT_TRUE(t->is_special(n));
  EXPECT_FALSE(t->is_special(n + 1));
  EXPECT_EQ(t->decode({n, wa, n + 1}, /*skip_special=*/true), "a<x>");
  EXPECT_EQ(t->decode({n, wa, n + 1}, /*skip_special=*/false), "<|im|> a<x>");
}

TEST(SpmTokenizer, DecodeDropsTheDummyPrefixSpaceOnce) {
  const SpmModel m = make_model({{"_", 0}, {"a", 0}, {"_a", -1}, {"__", -2}});
  auto t = make(m);
  const int32_t wa = t->piece_to_id(ws("_a")), sp = t->piece_to_id(ws("_"));
  EXPECT_EQ(t->decode({wa, wa}, true), "a a");
  EXPECT_EQ(t->decode({1, wa, wa}, true), "a a");
  EXPECT_EQ(t->decode({1, wa, wa}, false), "<s>a a");
  EXPECT_EQ(t->decode({wa, 1, wa}, true), "aa");  // after BOS too, as llama2.c does
  EXPECT_EQ(t->decode({sp, wa}, true), " a");     // only the first space goes
  EXPECT_EQ(t->decode({0}, false), "<unk>");
  EXPECT_EQ(t->decode({0}, true), "");
  EXPECT_EQ(t->decode({-1, 1 << 30}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t->token_bytes(wa), " a");
  EXPECT_EQ(t->token_bytes(3 + 'A'), "A");
  EXPECT_EQ(t->token_bytes(-5), "");
  EXPECT_EQ(t->decode(t->encode(" a  a ", false), true), " a  a ");
}

TEST(SpmTokenizer, RandomInputNeverBreaks) {
  const SpmModel m = make_model({{"_", 0}, {"a", 0}, {"_a", -1}, {"\xC3\xA9", -1}});
  auto t = make(m);
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>("a \xC3\xA9<>/s\xF0\x80"[rng() % 11]);
    const std::vector<int32_t> ids = t->encode(s, true);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t->vocab_size());
    const std::string back = t->decode(ids, true);
    EXPECT_TRUE(utf8_is_valid(back));
    if (utf8_is_valid(s) && s.find("<s>") == std::string::npos &&
        s.find("</s>") == std::string::npos && s.find("<unk>") == std::string::npos) {
      EXPECT_EQ(back, s);
    }
  }
}

TEST(SpmTokenizer, UnsupportedModelsAreRejected) {
  SpmModel unigram = make_model({{"a", 0}});
  unigram.model_type = SpmModelType::kUnigram;
  auto r = SentencePieceTokenizer::from_model(unigram, {}, "u.model");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);

  SpmModel charsmap = make_model({{"a", 0}});
  charsmap.normalizer_name = "nmt_nfkc";
  charsmap.precompiled_charsmap = "xyz";
  EXPECT_EQ(SentencePieceTokenizer::from_model(charsmap, {}, "c").status().code(),
            StatusCode::kUnimplemented);

  SpmModel missing_byte = make_model({{"a", 0}});
  missing_byte.pieces.erase(missing_byte.pieces.begin() + 3 + 0x41);
  r = SentencePieceTokenizer::from_model(missing_byte, {}, "b");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("<0x41>"), std::string::npos);

  SpmModel dup = make_model({{"a", 0}, {"a", -1}});
  EXPECT_EQ(SentencePieceTokenizer::from_model(dup, {}, "d").status().code(),
            StatusCode::kDataLoss);

  SpmModel no_unk = make_model({{"a", 0}});
  no_unk.pieces[0].type = SpmPieceType::kControl;
  no_unk.unk_id = -1;
  EXPECT_EQ(SentencePieceTokenizer::from_model(no_unk, {}, "n").status().code(),
            StatusCode::kDataLoss);
}

// A tokenizer.json as transformers' LlamaConverter writes it (legacy form), small.
nlohmann::json hf_json(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer) {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* p : {"_", "a", "b", "c", "ab", "bc", "_a", "_ab", "__"}) vocab[ws(p)] = id++;
  nlohmann::json j;
  j["version"] = "1.0";
  j["added_tokens"] = nlohmann::json::array();
  for (int i = 0; i < 3; ++i) {
    j["added_tokens"].push_back({{"id", i},
                                 {"content", i == 0   ? "<unk>"
                                             : i == 1 ? "<s>"
                                                      : "</s>"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  j["normalizer"] = normalizer;
  j["pre_tokenizer"] = pre_tokenizer;
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single",
                          {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  j["decoder"] = nullptr;
  // Ranks, not scores: "a b" comes before "b c", so "abc" is "ab" "c" here.
  j["model"] = {
      {"type", "BPE"},
      {"dropout", nullptr},
      {"unk_token", "<unk>"},
      {"fuse_unk", true},
      {"byte_fallback", true},
      {"vocab", vocab},
      {"merges", {"a b", ws("_ a"), "b c", ws("_a b"), nlohmann::json::array({ws("_"), ws("_")})}}};
  return j;
}

const nlohmann::json kLegacyNormalizer = {
    {"type", "Sequence"},
    {"normalizers",
     {{{"type", "Prepend"}, {"prepend", ws("_")}},
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ws("_")}}}}};

TEST(SpmTokenizerHfJson, LegacyLlamaForm) {
  const nlohmann::json j = hf_json(kLegacyNormalizer, nullptr);
  EXPECT_TRUE(is_spm_style_tokenizer_json(j));
  auto r = SentencePieceTokenizer::from_hf_json(j, {}, "tokenizer.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& t = *r;
  // "a b" has the best rank; "▁ab" is in the vocabulary but no merge makes it from "▁" +
  // "ab", so (unlike sentencepiece's score rule) it is not formed.
  EXPECT_EQ(pieces(*t, t->encode("abc", false)), (Pieces{ws("_"), "ab", "c"}));
  EXPECT_EQ(pieces(*t, t->encode("ab", false)), (Pieces{ws("_"), "ab"}));
  EXPECT_EQ(pieces(*t, t->encode("a", false)), (Pieces{ws("_a")}));
  EXPECT_EQ(pieces(*t, t->encode("bc", false)), (Pieces{ws("_"), "bc"}));
  // The post-processor's <s> is BOS and is added.
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->encode("a", true), (std::vector<int32_t>{1, t->piece_to_id(ws("_a"))}));
  EXPECT_EQ(pieces(*t, t->encode("a</s>a", false)), (Pieces{ws("_a"), "</s>", ws("_a")}));
  EXPECT_EQ(pieces(*t, t->encode("\xC3\xA9", false)), (Pieces{ws("_"), "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t->decode(t->encode(" abc a", true), true), " abc a");
  EXPECT_TRUE(t->is_special(2));
}

TEST(SpmTokenizerHfJson, MetaspaceFirstPrependsOnceAndNotBeforeASpace) {
  const nlohmann::json meta = {{"type", "Metaspace"},
                               {"replacement", ws("_")},
                               {"prepend_scheme", "first"},
                               {"split", false}};
  auto r = SentencePieceTokenizer::from_hf_json(hf_json(nullptr, meta), {}, "t.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& t = *r;
  EXPECT_EQ(pieces(*t, t->encode("a</s>a", false)), (Pieces{ws("_a"), "</s>", "a"}));
  // Metaspace adds no "▁" to text that already starts with one.
  EXPECT_EQ(pieces(*t, t->encode(" a", false)), (Pieces{ws("_a")}));
}

TEST(SpmTokenizerHfJson, MetaspaceSplitRunsBpePerWord) {
  // With split, "▁▁" cannot form across the word boundary in " a": "▁" | "▁a".
  const nlohmann::json split = {{"type", "Metaspace"},
                                {"replacement", ws("_")},
                                {"prepend_scheme", "always"},
                                {"split", true}};
  auto r = SentencePieceTokenizer::from_hf_json(hf_json(nullptr, split), {}, "t.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(pieces(**r, (*r)->encode("b  a", false)), (Pieces{ws("_"), "b", ws("_"), ws("_a")}));
  // Without split, "▁ ▁" merges across the run of spaces (leftmost pair first); with split
  // every "▁" is a word of its own.
  const nlohmann::json whole = {{"type", "Metaspace"},
                                {"replacement", ws("_")},
                                {"prepend_scheme", "always"},
                                {"split", false}};
  auto w = SentencePieceTokenizer::from_hf_json(hf_json(nullptr, whole), {}, "t.json");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(pieces(**w, (*w)->encode("b   c", false)),
            (Pieces{ws("_"), "b", ws("__"), ws("_"), "c"}));
  EXPECT_EQ(pieces(**r, (*r)->encode("b   c", false)),
            (Pieces{ws("_"), "b", ws("_"), ws("_"), ws("_"), "c"}));
}

TEST(SpmTokenizerHfJson, DetectionAndRejection) {
  nlohmann::json byte_level = hf_json(nullptr, {{"type", "ByteLevel"}});
  byte_level["model"]["byte_fallback"] = false;
  EXPECT_FALSE(is_spm_style_tokenizer_json(byte_level));
  EXPECT_FALSE(is_spm_style_tokenizer_json(nlohmann::json::array()));

  nlohmann::json nfkc = hf_json({{"type", "NFKC"}}, nullptr);
  EXPECT_EQ(SentencePieceTokenizer::from_hf_json(nfkc, {}, "t.json").status().code(),
            StatusCode::kUnimplemented);

  nlohmann::json bad_merge = hf_json(kLegacyNormalizer, nullptr);
  bad_merge["model"]["merges"].push_back("a zz");
  auto r = SentencePieceTokenizer::from_hf_json(bad_merge, {}, "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("merge 5"), std::string::npos) << r.status().message();

  nlohmann::json gap = hf_json(kLegacyNormalizer, nullptr);
  gap["model"]["vocab"]["zz"] = 100000;
  EXPECT_EQ(SentencePieceTokenizer::from_hf_json(gap, {}, "t.json").status().code(),
            StatusCode::kDataLoss);
}

}  // namespace
}  // namespace qs::tok
