// tokenizer: CLIP's BPE (see clip_tokenizer.h). The cleaning is what CLIPTokenizerFast's
// tokenizer.json spells (NFC, Replace(\s+, " "), Lowercase) plus the strip the slow tokenizer
// does; ftfy's fixes are not applied (neither does the fast tokenizer). Lower-casing covers
// ASCII only: an upper-case non-ASCII letter stays as it is (a known difference).
#include "tokenizer/clip_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/json.h"
#include "core/limits.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"
#include "tokenizer/utf8_nfc.h"

namespace qs::tok {

namespace fs = std::filesystem;

namespace {

// CLIP's word pattern (openai/CLIP simple_tokenizer.py, as CLIPTokenizerFast writes it).
constexpr std::string_view kClipPattern =
    R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";
constexpr std::string_view kBos = "<|startoftext|>";
constexpr std::string_view kEos = "<|endoftext|>";
constexpr std::string_view kEow = "</w>";
constexpr size_t kMaxWordBytes = 4096;

std::string clean(std::string_view text) {
  const std::string nfc = utf8_nfc(utf8_make_valid(text));
  std::string out;
  bool space = false;
  for (unsigned char ch : nfc) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch));
  }
  return out;
}

// UTF-8 characters of s.
std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::max<size_t>(1, utf8_char_len(s, i));
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// The ids index the text model's embedding table, so they are checked here, never narrowed.
Status add_vocab(const std::string& where, const std::string& piece, const nlohmann::json& id,
                 std::unordered_map<std::string, int32_t>* vocab) {
  if (!id.is_number_integer()) return data_loss(where + ": vocab id of '" + piece + "'");
  const int64_t v = id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX ? limits::kMaxVocab
                                                                              : id.get<int64_t>();
  if (v < 0 || v >= limits::kMaxVocab) {
    return data_loss(where + ": vocab id " + id.dump() + " of '" + piece + "' is outside 0.." +
                     std::to_string(limits::kMaxVocab - 1));
  }
  (*vocab)[piece] = static_cast<int32_t>(v);
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<ClipTokenizer>> ClipTokenizer::load(const std::string& dir) {
  std::unique_ptr<ClipTokenizer> t(new ClipTokenizer());
  std::vector<std::pair<std::string, std::string>> merges;
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  if (fs::exists(json_path)) {
    QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(json_path.string()));
    const std::string where = json_path.string();
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object() ||
        json_string_or(j["model"], "type", "") != "BPE" || !j["model"].contains("vocab") ||
        !j["model"]["vocab"].is_object() || !j["model"].contains("merges") ||
        !j["model"]["merges"].is_array()) {
      return data_loss(where + ": not a BPE tokenizer.json with vocab and merges");
    }
    const auto& m = j["model"];
    if (!m.contains("end_of_word_suffix") || m["end_of_word_suffix"] != std::string(kEow)) {
      return unimplemented(where + ": a CLIP tokenizer needs end_of_word_suffix \"</w>\"");
    }
    for (const auto& [piece, id] : m["vocab"].items()) {
      QS_RETURN_IF_ERROR(add_vocab(where, piece, id, &t->vocab_));
    }
    for (const auto& mg : m["merges"]) {
      if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
      } else if (mg.is_string() && mg.get<std::string>().find(' ') != std::string::npos) {
        const std::string s = mg.get<std::string>();
        merges.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
      } else {
        return data_loss(where + ": merge " + mg.dump() + " is not a pair");
      }
    }
  } else {
    const fs::path vocab_path = fs::path(dir) / "vocab.json";
    const fs::path merges_path = fs::path(dir) / "merges.txt";
    if (!fs::exists(vocab_path) || !fs::exists(merges_path)) {
      return not_found(dir + ": no tokenizer.json, nor vocab.json + merges.txt");
    }
    QS_ASSIGN_OR_RETURN(nlohmann::json v, read_json(vocab_path.string()));
    if (!v.is_object()) return data_loss(vocab_path.string() + ": not an object");
    for (const auto& [piece, id] : v.items()) {
      QS_RETURN_IF_ERROR(add_vocab(vocab_path.string(), piece, id, &t->vocab_));
    }
    std::ifstream in(merges_path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string::npos) return data_loss(merges_path.string() + ": line '" + line + "'");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    t->ranks_.emplace(merges[i], static_cast<int32_t>(i));
  }
  auto id_of = [&](std::string_view piece) -> Result<int32_t> {
    auto it = t->vocab_.find(std::string(piece));
    if (it == t->vocab_.end()) return data_loss(dir + ": vocabulary lacks " + std::string(piece));
    return it->second;
  };
  QS_ASSIGN_OR_RETURN(t->bos_id_, id_of(kBos));
  QS_ASSIGN_OR_RETURN(t->eos_id_, id_of(kEos));
  t->pad_id_ = t->unk_id_ = t->eos_id_;  // CLIPTokenizer: unk and pad are <|endoftext|>
  QS_ASSIGN_OR_RETURN(t->splitter_, RegexSplitter::create(kClipPattern, SplitBehavior::kIsolated));
  return t;
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text, size_t max_tokens) const {
  std::vector<std::string> pieces;
  splitter_->split(clean(text), &pieces);
  std::vector<int32_t> ids;
  for (std::string piece : pieces) {
    if (ids.size() >= max_tokens) break;
    if (piece == " ") continue;  // the gaps between words
    if (piece.size() > kMaxWordBytes)
      piece.resize(utf8_valid_prefix(piece.substr(0, kMaxWordBytes)));
    if (piece == kBos || piece == kEos) {
      ids.push_back(piece == kBos ? bos_id_ : eos_id_);
      continue;
    }
    std::vector<std::string> sym = chars_of(byte_level_encode(piece));
    sym.back() += kEow;
    // Merge the adjacent pair of lowest rank until none has one.
    while (sym.size() > 1) {
      int32_t best = std::numeric_limits<int32_t>::max();
      size_t at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ranks_.find({sym[i], sym[i + 1]});
        if (it != ranks_.end() && it->second < best) best = it->second, at = i;
      }
      if (best == std::numeric_limits<int32_t>::max()) break;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    for (const std::string& s : sym) {
      auto it = vocab_.find(s);
      ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
    }
  }
  if (ids.size() > max_tokens) ids.resize(max_tokens);
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text, int64_t max_length) const {
  const size_t keep = static_cast<size_t>(std::max<int64_t>(max_length - 2, 0));
  std::vector<int32_t> body = encode(text, keep);
  if (body.size() > keep) body.resize(keep);
  std::vector<int32_t> ids = {bos_id_};
  ids.insert(ids.end(), body.begin(), body.end());
  ids.push_back(eos_id_);
  ids.resize(static_cast<size_t>(std::max<int64_t>(max_length, 0)), pad_id_);
  return ids;
}

}  // namespace qs::tok
