// tokenizer: HF tokenizer.json -> BpeTokenizer for byte-level BPE models (see
// bpe_tokenizer.h for what is accepted). Anything we would tokenize differently from HF is
// refused with Unimplemented rather than loaded approximately.
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/mmap_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/json_node.h"

namespace qs::tok {
namespace {

using nlohmann::json;

bool bool_field(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// Escapes every ASCII punctuation character so `s` matches itself as a PCRE2 pattern.
std::string regex_quote(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain =
        u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Adds the steps of one HF pre_tokenizer to `pre`; notes whether a ByteLevel step was seen.
Status add_pretokenizer(const json& j, const std::string& where, Pretokenizer* pre,
                        bool* saw_byte_level) {
  if (j.is_null()) return ok_status();
  const std::string type = node_type(j);
  if (type == "Sequence") {
    auto list = j.find("pretokenizers");
    if (list == j.end() || !list->is_array()) {
      return data_loss(where + ": Sequence pre_tokenizer without a \"pretokenizers\" list");
    }
    for (const json& item : *list) {
      QS_RETURN_IF_ERROR(add_pretokenizer(item, where, pre, saw_byte_level));
    }
    return ok_status();
  }
  if (type == "ByteLevel") {
    *saw_byte_level = true;
    // HF defaults: add_prefix_space true, use_regex true.
    if (bool_field(j, "add_prefix_space", true)) pre->add_prefix_space();
    if (bool_field(j, "use_regex", true)) {
      QS_RETURN_IF_ERROR(
          pre->add_split(pretokenizer_pattern(PretokenizerKind::kGpt2), SplitBehavior::kIsolated));
    }
    return ok_status();
  }
  if (type == "Split") {
    if (bool_field(j, "invert", false)) {
      return unimplemented(where + ": Split pre_tokenizer with invert = true");
    }
    auto pattern = j.find("pattern");
    std::string regex;
    if (pattern != j.end() && pattern->is_object() && pattern->contains("Regex") &&
        (*pattern)["Regex"].is_string()) {
      regex = (*pattern)["Regex"].get<std::string>();
    } else if (pattern != j.end() && pattern->is_object() && pattern->contains("String") &&
               (*pattern)["String"].is_string()) {
      regex = regex_quote((*pattern)["String"].get<std::string>());
    } else {
      return data_loss(where +
                       ": Split pre_tokenizer needs pattern {\"Regex\": ...} or "
                       "{\"String\": ...}");
    }
    const std::string behavior = json_string_or(j, "behavior", "Isolated");
    SplitBehavior b;
    if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else {
      return unimplemented(where + ": Split behavior \"" + behavior + "\"");
    }
    Status st = pre->add_split(regex, b);
    return st.with_context(where);
  }
  if (type == "Digits") {
    // HF Digits isolates numeric characters (char::is_numeric), one by one or as runs.
    const bool individual = bool_field(j, "individual_digits", false);
    return pre->add_split(individual ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated);
  }
  return unimplemented(where + ": pre_tokenizer type \"" + type +
                       "\" (byte-level BPE supports ByteLevel, Split, Digits, Sequence)");
}

// Reads the ids HF's TemplateProcessing puts around a single sequence.
Status read_post_processor(const json& j, const std::string& where, std::vector<int32_t>* prefix,
                           std::vector<int32_t>* suffix, bool* has_template) {
  if (j.is_null()) return ok_status();
  const std::string type = node_type(j);
  if (type == "ByteLevel") return ok_status();  // offsets only; ids unchanged
  if (type == "Sequence") {
    auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) {
      return data_loss(where + ": Sequence post_processor without a \"processors\" list");
    }
    for (const json& item : *list) {
      QS_RETURN_IF_ERROR(read_post_processor(item, where, prefix, suffix, has_template));
    }
    return ok_status();
  }
  if (type != "TemplateProcessing") {
    return unimplemented(where + ": post_processor type \"" + type + "\"");
  }
  auto single = j.find("single");
  auto specials = j.find("special_tokens");
  if (single == j.end() || !single->is_array()) {
    return data_loss(where + ": TemplateProcessing without a \"single\" template");
  }
  prefix->clear();
  suffix->clear();
  bool seen_sequence = false;
  for (const json& item : *single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    auto special = item.find("SpecialToken");
    if (special == item.end() || !special->is_object() || !special->contains("id") ||
        !(*special)["id"].is_string()) {
      return data_loss(where + ": TemplateProcessing item " + item.dump() + " is not understood");
    }
    const std::string name = (*special)["id"].get<std::string>();
    if (specials == j.end() || !specials->is_object() || !specials->contains(name) ||
        !(*specials)[name].contains("ids") || !(*specials)[name]["ids"].is_array()) {
      return data_loss(where + ": TemplateProcessing names \"" + name +
                       "\" but special_tokens gives no ids for it");
    }
    for (const json& id : (*specials)[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return data_loss(where + ": special token \"" + name + "\" has a bad id " + id.dump());
      }
      (seen_sequence ? suffix : prefix)->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  *has_template = true;
  return ok_status();
}

// model.merges: "a b" strings (older files) or [a, b] pairs (tokenizers >= 0.20).
Status read_merges(const json& merges, const std::string& where,
                   std::vector<std::pair<std::string, std::string>>* out) {
  if (merges.is_null()) return ok_status();
  if (!merges.is_array()) return data_loss(where + ": model.merges must be a list");
  out->reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        return data_loss(where + ": merge " + std::to_string(i + 1) + " \"" + s +
                         "\" is not two tokens separated by one space");
      }
      out->emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out->emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return data_loss(where + ": merge " + std::to_string(i + 1) + " is " + m.dump() +
                       ", expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> load_bpe_tokenizer_json(const json& j,
                                                              const std::string& where) {
  if (!j.is_object()) return data_loss(where + ": expected a JSON object");
  auto model_it = j.find("model");
  if (model_it == j.end() || !model_it->is_object()) {
    return data_loss(where + ": no \"model\" object");
  }
  const json& m = *model_it;
  const std::string model_type = node_type(m);
  if (!model_type.empty() && model_type != "BPE") {
    return unimplemented(where + ": model type \"" + model_type + "\" is not BPE");
  }
  if (bool_field(m, "byte_fallback", false)) {
    return unimplemented(where +
                         ": BPE with byte_fallback (SentencePiece-style) is not "
                         "byte-level BPE");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && it->is_string() && !it->get<std::string>().empty()) {
      return unimplemented(where + ": BPE with " + key);
    }
  }

  // Normalizer: HF runs it on the text between added tokens, before pre-tokenization.
  bool nfc = false;
  auto norm = j.find("normalizer");
  if (norm != j.end() && !norm->is_null()) {
    if (node_type(*norm) != "NFC") {
      return unimplemented(where + ": normalizer \"" + node_type(*norm) + "\"");
    }
    nfc = true;
  }

  Pretokenizer pre;
  bool byte_level = false;
  auto pre_it = j.find("pre_tokenizer");
  if (pre_it != j.end()) {
    QS_RETURN_IF_ERROR(add_pretokenizer(*pre_it, where, &pre, &byte_level));
  }
  auto dec = j.find("decoder");
  if (dec != j.end() && node_type(*dec) == "ByteLevel") byte_level = true;
  if (!byte_level) {
    return unimplemented(where +
                         ": BPE without a ByteLevel pre_tokenizer or decoder is not "
                         "byte-level BPE");
  }

  auto vocab_it = m.find("vocab");
  if (vocab_it == m.end() || !vocab_it->is_object()) {
    return data_loss(where + ": model.vocab must map token text to id");
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& [piece, id] : vocab_it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return data_loss(where + ": token \"" + piece + "\" has id " + id.dump());
    }
    vocab.emplace_back(piece, static_cast<int32_t>(id.get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  auto merges_it = m.find("merges");
  if (merges_it != m.end()) QS_RETURN_IF_ERROR(read_merges(*merges_it, where, &merges));
  QS_ASSIGN_OR_RETURN(BpeModel model, build_byte_level_bpe(vocab, merges, where));
  model.set_ignore_merges(bool_field(m, "ignore_merges", false));
  auto unk = m.find("unk_token");
  if (unk != m.end() && unk->is_string()) {
    const int32_t unk_id = model.find_piece(unk->get<std::string>());
    if (unk_id < 0) {
      return data_loss(where + ": unk_token \"" + unk->get<std::string>() +
                       "\" is not in the vocabulary");
    }
    model.set_unk_id(unk_id);
  }

  std::vector<AddedToken> added;
  auto added_it = j.find("added_tokens");
  if (added_it != j.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return data_loss(where + ": added_tokens must be a list");
    for (size_t i = 0; i < added_it->size(); ++i) {
      const std::string item_where = where + ": added_tokens[" + std::to_string(i) + "]";
      QS_ASSIGN_OR_RETURN(AddedToken a, parse_added_token((*added_it)[i], item_where));
      if (a.id < 0) return data_loss(item_where + " has no id");
      added.push_back(std::move(a));
    }
  }

  std::vector<int32_t> prefix, suffix;
  bool has_template = false;
  auto post = j.find("post_processor");
  if (post != j.end()) {
    QS_RETURN_IF_ERROR(read_post_processor(*post, where, &prefix, &suffix, &has_template));
  }

  auto tok = std::make_unique<BpeTokenizer>(std::move(model), std::move(pre), std::move(added));
  tok->set_nfc(nfc);
  for (int32_t id : prefix) {
    if (id >= tok->vocab_size()) {
      return data_loss(where + ": post_processor uses id " + std::to_string(id) +
                       ", past the vocabulary");
    }
  }
  for (int32_t id : suffix) {
    if (id >= tok->vocab_size()) {
      return data_loss(where + ": post_processor uses id " + std::to_string(id) +
                       ", past the vocabulary");
    }
  }
  // A template that starts with a special token is how HF spells "add BOS".
  if (!prefix.empty()) QS_RETURN_IF_ERROR(tok->set_bos_token(tok->id_to_piece(prefix[0])));
  if (has_template) tok->set_template(std::move(prefix), std::move(suffix));
  return tok;
}

Result<std::unique_ptr<BpeTokenizer>> load_bpe_tokenizer_json_file(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return data_loss(path + ": not valid JSON: " + e.what());
  }
  return load_bpe_tokenizer_json(j, path);
}

}  // namespace qs::tok
