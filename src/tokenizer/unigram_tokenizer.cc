// tokenizer: Unigram (see unigram_tokenizer.h), after HF tokenizers' models/unigram (lattice
// + Viterbi) and the T5 tokenizer.json's pre-tokenizer (WhitespaceSplit, Metaspace "always").
#include "tokenizer/unigram_tokenizer.h"

#include <filesystem>
#include <limits>

#include "core/json.h"
#include "core/limits.h"
#include "tokenizer/json_node.h"
#include "tokenizer/utf8.h"

namespace qs::tok {

namespace fs = std::filesystem;

namespace {

constexpr double kUnkPenalty = 10.0;  // HF Unigram's K_UNK_PENALTY
// SentencePiece trains pieces of at most 16 characters; a longer one is a hostile file making
// every position of a word walk it.
constexpr size_t kMaxPieceBytes = 1024;

}  // namespace

Result<std::unique_ptr<UnigramTokenizer>> UnigramTokenizer::load(const std::string& dir) {
  const std::string where = (fs::path(dir) / "tokenizer.json").string();
  QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(where));
  if (!j.is_object() || node_type(j["model"]) != "Unigram" || !j["model"].contains("vocab") ||
      !j["model"]["vocab"].is_array()) {
    return data_loss(where + ": not a Unigram tokenizer.json with a vocab list");
  }
  std::unique_ptr<UnigramTokenizer> t(new UnigramTokenizer());
  const auto& m = j["model"];
  if (m["vocab"].size() > static_cast<size_t>(limits::kMaxVocab)) {
    return data_loss(where + ": " + std::to_string(m["vocab"].size()) +
                     " vocab entries, above the limit of " + std::to_string(limits::kMaxVocab));
  }
  double min_score = std::numeric_limits<double>::infinity();
  t->node_piece_.push_back(-1);
  for (const auto& e : m["vocab"]) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
      return data_loss(where + ": vocab entry " + e.dump().substr(0, 80) +
                       " is not [piece, score]");
    }
    const std::string& piece = e[0].get_ref<const std::string&>();
    if (piece.size() > kMaxPieceBytes) {
      return data_loss(where + ": vocab piece " + std::to_string(t->scores_.size()) + " is " +
                       std::to_string(piece.size()) + " bytes, above the limit of " +
                       std::to_string(kMaxPieceBytes));
    }
    const int32_t id = static_cast<int32_t>(t->scores_.size());
    int32_t node = 0;
    for (unsigned char b : piece) {
      auto [it, added] = t->edges_.emplace((static_cast<uint64_t>(node) << 8) | b,
                                           static_cast<int32_t>(t->node_piece_.size()));
      if (added) t->node_piece_.push_back(-1);
      node = it->second;
    }
    if (node != 0 && t->node_piece_[node] < 0) t->node_piece_[node] = id;  // the first one wins
    t->scores_.push_back(e[1].get<double>());
    min_score = std::min(min_score, t->scores_.back());
  }
  t->unk_score_ = min_score - kUnkPenalty;
  if (m.contains("unk_id") && m["unk_id"].is_number_integer() && m["unk_id"].get<int64_t>() >= 0 &&
      m["unk_id"].get<int64_t>() < t->vocab_size()) {
    t->unk_id_ = static_cast<int32_t>(m["unk_id"].get<int64_t>());
  } else {
    return data_loss(where + ": unk_id missing or out of range");
  }
  if (m.contains("byte_fallback") && m["byte_fallback"] == true) {
    return unimplemented(where + ": Unigram byte_fallback is not supported");
  }
  // Normalizer: none, or T5's Sequence[Precompiled, Replace(" {2,}", " ")].
  const auto& norm = j.value("normalizer", nlohmann::json());
  std::vector<nlohmann::json> steps;
  if (node_type(norm) == "Sequence" && norm.contains("normalizers") &&
      norm["normalizers"].is_array()) {
    for (const auto& n : norm["normalizers"]) steps.push_back(n);
  } else if (!norm.is_null()) {
    steps.push_back(norm);
  }
  for (const auto& n : steps) {
    if (node_type(n) == "Precompiled") {
      t->ascii_only_ = true;
    } else if (node_type(n) == "Replace" && n.contains("pattern") && n["pattern"].is_object() &&
               json_string_or(n["pattern"], "Regex", "") == " {2,}" &&
               json_string_or(n, "content", "") == " ") {
      t->collapse_spaces_ = true;
    } else {
      return unimplemented(where + ": normalizer " + n.dump().substr(0, 80) + " is not supported");
    }
  }
  // Pre-tokenizer: WhitespaceSplit + Metaspace("▁", prepend_scheme "always"), or Metaspace.
  const auto& pre = j.value("pre_tokenizer", nlohmann::json());
  std::vector<nlohmann::json> pre_steps;
  if (node_type(pre) == "Sequence" && pre.contains("pretokenizers")) {
    for (const auto& p : pre["pretokenizers"]) pre_steps.push_back(p);
  } else {
    pre_steps.push_back(pre);
  }
  for (const auto& p : pre_steps) {
    const std::string type = node_type(p);
    const bool ok = type == "WhitespaceSplit" ||
                    (type == "Metaspace" && json_string_or(p, "replacement", "") == kMetaspace &&
                     json_string_or(p, "prepend_scheme", "always") == "always");
    if (!ok) return unimplemented(where + ": pre_tokenizer " + p.dump() + " is not supported");
  }
  auto id_of = [&](std::string_view piece) -> Result<int32_t> {
    int32_t node = 0;
    for (unsigned char b : piece) {
      if ((node = t->child(node, b)) < 0) break;
    }
    if (node <= 0 || t->node_piece_[node] < 0) {
      return data_loss(where + ": vocabulary lacks " + std::string(piece));
    }
    return t->node_piece_[node];
  };
  QS_ASSIGN_OR_RETURN(t->eos_id_, id_of("</s>"));
  QS_ASSIGN_OR_RETURN(t->pad_id_, id_of("<pad>"));
  return t;
}

int32_t UnigramTokenizer::child(int32_t node, uint8_t byte) const {
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

Result<std::vector<int32_t>> UnigramTokenizer::encode(std::string_view text,
                                                      size_t max_tokens) const {
  if (!utf8_is_valid(text)) return invalid_argument("t5 tokenizer: the text is not UTF-8");
  if (ascii_only_) {
    for (unsigned char c : text) {
      if (c >= 0x80 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
        return unimplemented(
            "t5 tokenizer: this tokenizer.json normalizes with a precompiled charsmap (NFKC), "
            "which quantserve implements only for printable ASCII text");
      }
    }
  }
  (void)collapse_spaces_;  // whitespace is split away below, which subsumes the collapse
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size() && ids.size() < max_tokens) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
                               text[i] == '\r' || text[i] == '\f' || text[i] == '\v')) {
      ++i;
    }
    size_t end = i;
    while (end < text.size() && !(text[end] == ' ' || text[end] == '\t' || text[end] == '\n' ||
                                  text[end] == '\r' || text[end] == '\f' || text[end] == '\v')) {
      ++end;
    }
    if (end == i) break;
    const std::string word = std::string(kMetaspace) + std::string(text.substr(i, end - i));
    i = end;
    // Viterbi over byte positions that start a character.
    const size_t n = word.size();
    std::vector<double> best(n + 1, -std::numeric_limits<double>::infinity());
    std::vector<size_t> from(n + 1, 0);
    std::vector<int32_t> via(n + 1, -1);
    best[0] = 0;
    for (size_t s = 0; s < n; ++s) {
      if (best[s] == -std::numeric_limits<double>::infinity()) continue;
      const size_t ch = std::max<size_t>(1, utf8_char_len(word, s));
      bool single = false;
      int32_t node = 0;
      for (size_t len = 1; s + len <= n; ++len) {
        if ((node = child(node, static_cast<uint8_t>(word[s + len - 1]))) < 0) break;
        const int32_t id = node_piece_[node];
        if (id < 0) continue;
        if (len == ch) single = true;
        const double sc = best[s] + scores_[id];
        if (sc > best[s + len]) best[s + len] = sc, from[s + len] = s, via[s + len] = id;
      }
      if (!single && best[s] + unk_score_ > best[s + ch]) {
        best[s + ch] = best[s] + unk_score_, from[s + ch] = s, via[s + ch] = unk_id_;
      }
    }
    std::vector<int32_t> rev;
    for (size_t p = n; p > 0; p = from[p]) rev.push_back(via[p]);
    for (auto it = rev.rbegin(); it != rev.rend(); ++it) {
      if (*it == unk_id_ && !ids.empty() && ids.back() == unk_id_ && it != rev.rbegin()) continue;
      ids.push_back(*it);
    }
  }
  return ids;
}

Result<std::vector<int32_t>> UnigramTokenizer::encode_padded(std::string_view text,
                                                             int64_t max_length) const {
  if (max_length < 1) return invalid_argument("t5 tokenizer: max_length must be at least 1");
  const size_t keep = static_cast<size_t>(max_length - 1);
  QS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(text, keep));
  if (ids.size() > keep) ids.resize(keep);
  ids.push_back(eos_id_);
  ids.resize(static_cast<size_t>(max_length), pad_id_);
  return ids;
}

}  // namespace qs::tok
