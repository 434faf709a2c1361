// tokenizer: SentencePiece-style HF tokenizer.json (what transformers' LlamaConverter writes:
// BPE with byte_fallback, a Prepend("▁") + Replace(" ", "▁") normalizer or a Metaspace
// pre-tokenizer, merges) -> SentencePieceTokenizer with HF's merge ranks.
#include <string>
#include <unordered_set>

#include "core/json.h"
#include "tokenizer/json_node.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

using nlohmann::json;

bool is_byte_piece(std::string_view s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.substr(0, 3) == "<0x" && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

bool string_field_is(const json& j, const char* key, std::string_view value) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() && it->get<std::string>() == value;
}

// Replace{pattern: {String: " "}, content: "▁"}
bool is_space_to_metaspace(const json& n) {
  if (node_type(n) != "Replace" || !string_field_is(n, "content", kMetaspace)) return false;
  auto pattern = n.find("pattern");
  return pattern != n.end() && pattern->is_object() && string_field_is(*pattern, "String", " ");
}

bool uses_metaspace(const json& node) {
  const std::string type = node_type(node);
  if (type == "Metaspace") return true;
  if (type == "Prepend") return string_field_is(node, "prepend", kMetaspace);
  if (type == "Replace") return is_space_to_metaspace(node);
  if (type == "Sequence") {
    for (const char* key : {"normalizers", "pretokenizers"}) {
      auto it = node.find(key);
      if (it == node.end() || !it->is_array()) continue;
      for (const json& child : *it) {
        if (uses_metaspace(child)) return true;
      }
    }
  }
  return false;
}

struct TextOptions {
  bool dummy_prefix = false;
  bool prefix_every_run = true;
  bool prefix_only_if_missing = false;
  bool escape_whitespaces = false;
  bool split = false;
};

Status read_normalizer(const json& n, const std::string& source, TextOptions& o) {
  if (n.is_null()) return ok_status();
  const std::string type = node_type(n);
  if (type == "Sequence") {
    auto list = n.find("normalizers");
    if (list == n.end() || !list->is_array()) {
      return data_loss(source + ": Sequence normalizer without a \"normalizers\" list");
    }
    for (const json& child : *list) QS_RETURN_IF_ERROR(read_normalizer(child, source, o));
    return ok_status();
  }
  if (type == "Prepend" && string_field_is(n, "prepend", kMetaspace)) {
    // Normalizers run on each text run between added tokens: a prefix on every run.
    o.dummy_prefix = true;
    o.prefix_every_run = true;
    return ok_status();
  }
  if (is_space_to_metaspace(n)) {
    o.escape_whitespaces = true;
    return ok_status();
  }
  return unimplemented(source + ": normalizer " + n.dump() +
                       " (a SentencePiece-style tokenizer.json may only Prepend \"▁\" and "
                       "Replace \" \" by \"▁\")");
}

Status read_pre_tokenizer(const json& p, const std::string& source, TextOptions& o) {
  if (p.is_null()) return ok_status();
  if (node_type(p) == "Sequence") {
    auto list = p.find("pretokenizers");
    if (list != p.end() && list->is_array() && list->size() == 1) {
      return read_pre_tokenizer((*list)[0], source, o);
    }
  }
  if (node_type(p) != "Metaspace" || !string_field_is(p, "replacement", kMetaspace)) {
    return unimplemented(source + ": pre_tokenizer " + p.dump().substr(0, 200) +
                         " (a SentencePiece-style tokenizer.json may only use Metaspace \"▁\")");
  }
  o.escape_whitespaces = true;
  o.prefix_only_if_missing = true;
  // Older files have add_prefix_space and no prepend_scheme; "split" defaulted to true.
  std::string scheme = "always";
  auto ps = p.find("prepend_scheme");
  if (ps != p.end() && ps->is_string()) {
    scheme = ps->get<std::string>();
  } else {
    auto aps = p.find("add_prefix_space");
    if (aps != p.end() && aps->is_boolean() && !aps->get<bool>()) scheme = "never";
  }
  if (scheme == "always") {
    o.dummy_prefix = true;
    o.prefix_every_run = true;
  } else if (scheme == "first") {
    o.dummy_prefix = true;
    o.prefix_every_run = false;
  } else if (scheme == "never") {
    o.dummy_prefix = false;
  } else {
    return data_loss(source + ": Metaspace prepend_scheme \"" + scheme + "\" is unknown");
  }
  auto split = p.find("split");
  o.split = split == p.end() || !split->is_boolean() || split->get<bool>();
  return ok_status();
}

// The special tokens TemplateProcessing puts around a single sequence: {first, last}, each ""
// when absent.
std::pair<std::string, std::string> template_specials(const json& post) {
  std::pair<std::string, std::string> out;
  const json* single = nullptr;
  if (node_type(post) == "TemplateProcessing") {
    auto it = post.find("single");
    if (it != post.end() && it->is_array() && !it->empty()) single = &*it;
  }
  if (single == nullptr) return out;
  auto special_id = [](const json& item) -> std::string {
    if (!item.is_object()) return "";
    auto st = item.find("SpecialToken");
    if (st == item.end() || !st->is_object()) return "";
    auto id = st->find("id");
    return id != st->end() && id->is_string() ? id->get<std::string>() : "";
  };
  out.first = special_id(single->front());
  if (single->size() > 1) out.second = special_id(single->back());
  return out;
}

}  // namespace

bool is_spm_style_tokenizer_json(const json& j) {
  if (!j.is_object()) return false;
  auto model = j.find("model");
  if (model == j.end() || node_type(*model) != "BPE") return false;
  auto fallback = model->find("byte_fallback");
  if (fallback != model->end() && fallback->is_boolean() && fallback->get<bool>()) return true;
  for (const char* key : {"normalizer", "pre_tokenizer"}) {
    auto it = j.find(key);
    if (it != j.end() && uses_metaspace(*it)) return true;
  }
  return false;
}

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::from_hf_json(
    const json& j, const TokenizerConfig& config, const std::string& source) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return data_loss(source + ": no \"model\" object");
  }
  const json& model = j["model"];
  if (node_type(model) != "BPE") {
    return unimplemented(source + ": model type \"" + node_type(model) + "\" (only BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      return unimplemented(source + ": BPE " + key + " " + it->dump());
    }
  }

  TextOptions text;
  QS_RETURN_IF_ERROR(read_normalizer(j.value("normalizer", json()), source, text));
  QS_RETURN_IF_ERROR(read_pre_tokenizer(j.value("pre_tokenizer", json()), source, text));

  // Added tokens of tokenizer.json, then those of tokenizer_config.json not already there.
  TokenizerConfig cfg = config;
  std::vector<AddedToken> added;
  auto file_added = j.find("added_tokens");
  if (file_added != j.end() && file_added->is_array()) {
    for (size_t i = 0; i < file_added->size(); ++i) {
      QS_ASSIGN_OR_RETURN(AddedToken tok,
                          parse_added_token((*file_added)[i],
                                            source + ": added_tokens[" + std::to_string(i) + "]"));
      if (tok.id < 0)
        return data_loss(source + ": added_tokens[" + std::to_string(i) + "] has no id");
      added.push_back(std::move(tok));
    }
  }
  std::unordered_set<int32_t> ids;
  for (const AddedToken& a : added) ids.insert(a.id);
  for (const AddedToken& tok : config.added_tokens) {
    if (ids.insert(tok.id).second) added.push_back(tok);
  }
  cfg.added_tokens = added;

  // The vocabulary: piece -> id, dense from 0.
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object() || vocab->empty()) {
    return data_loss(source + ": model.vocab must be a non-empty object");
  }
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                              ? model["unk_token"].get<std::string>()
                              : "";
  const bool byte_fallback = json_bool_or(model, "byte_fallback", false);
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->pieces_.resize(vocab->size());
  std::vector<bool> filled(vocab->size(), false);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() >= static_cast<int64_t>(vocab->size())) {
      return data_loss(source + ": vocab id of \"" + it.key() + "\" is " + it->dump() +
                       ", expected 0.." + std::to_string(vocab->size() - 1));
    }
    const int32_t id = static_cast<int32_t>(it->get<int64_t>());
    if (filled[id]) return data_loss(source + ": vocab id " + std::to_string(id) + " used twice");
    filled[id] = true;
    Entry& e = t->pieces_[id];
    e.piece = it.key();
    if (e.piece == unk) {
      e.type = SpmPieceType::kUnknown;
    } else if (byte_fallback && is_byte_piece(e.piece)) {
      e.type = SpmPieceType::kByte;
    }
  }
  for (const AddedToken& tok : added) {
    if (tok.special && tok.id < static_cast<int32_t>(t->pieces_.size()) &&
        t->pieces_[tok.id].piece == tok.content &&
        t->pieces_[tok.id].type == SpmPieceType::kNormal) {
      t->pieces_[tok.id].type = SpmPieceType::kControl;
    }
  }
  for (Entry& e : t->pieces_) {
    e.special = e.type == SpmPieceType::kControl || e.type == SpmPieceType::kUnknown;
  }

  t->byte_fallback_ = byte_fallback;
  t->fuse_unk_ = json_bool_or(model, "fuse_unk", false);
  t->ignore_merges_ = json_bool_or(model, "ignore_merges", false);
  t->add_dummy_prefix_ = text.dummy_prefix;
  t->prefix_every_run_ = text.prefix_every_run;
  t->prefix_only_if_missing_ = text.prefix_only_if_missing;
  t->escape_whitespaces_ = text.escape_whitespaces;
  t->split_on_metaspace_ = text.split;
  t->remove_extra_whitespaces_ = false;
  t->use_merge_ranks_ = true;

  // BOS/EOS: the config's, else the post-processor's; the post-processor decides whether they
  // are added unless add_bos_token / add_eos_token say otherwise.
  const auto [first, last] = template_specials(j.value("post_processor", json()));
  if (!cfg.bos_token && !first.empty()) cfg.bos_token = AddedToken{-1, first, true};
  if (!cfg.eos_token && !last.empty()) cfg.eos_token = AddedToken{-1, last, true};
  if (!cfg.unk_token && !unk.empty()) cfg.unk_token = AddedToken{-1, unk, true};
  const bool template_bos = !first.empty() && cfg.bos_token && cfg.bos_token->content == first;
  const bool template_eos = !last.empty() && cfg.eos_token && cfg.eos_token->content == last;
  QS_RETURN_IF_ERROR(t->finish(cfg, source, template_bos, template_eos));

  // Merges, in rank order: "a b" strings or [a, b] pairs.
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    return data_loss(source + ": model.merges must be a list");
  }
  t->merge_ranks_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& m = (*merges)[rank];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return data_loss(source + ": merge " + std::to_string(rank) + " \"" + s +
                         "\" is not two pieces separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return data_loss(source + ": merge " + std::to_string(rank) + " is " + m.dump());
    }
    const int32_t ia = t->piece_to_id(a), ib = t->piece_to_id(b), iab = t->piece_to_id(a + b);
    if (ia < 0 || ib < 0 || iab < 0) {
      return data_loss(source + ": merge " + std::to_string(rank) + " (\"" + a + "\", \"" + b +
                       "\") names a piece that is not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(ia) << 32) | static_cast<uint32_t>(ib);
    t->merge_ranks_.emplace(key, std::make_pair(static_cast<int32_t>(rank), iab));
  }
  return t;
}

}  // namespace qs::tok
