// tokenizer: reading tokenizer_config.json / special_tokens_map.json, and cutting text at
// added tokens (see tokenizer_config.h).
#include "tokenizer/tokenizer_config.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "core/mmap_file.h"

namespace qs::tok {
namespace {

using nlohmann::json;

Result<std::optional<bool>> optional_bool(const json& obj, const char* key,
                                          const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return invalid_argument(where + ": \"" + key + "\" must be true or false, found " + it->dump());
  }
  return std::optional<bool>(it->get<bool>());
}

// A special-token field: absent or null -> nullopt.
Result<std::optional<AddedToken>> special_token_field(const json& obj, const char* key,
                                                      const std::string& source) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<AddedToken>();
  QS_ASSIGN_OR_RETURN(AddedToken token, parse_added_token(*it, source + ": " + key));
  token.special = true;  // named by a *_token field, so special by definition
  return std::optional<AddedToken>(std::move(token));
}

Status apply_special_tokens(const json& obj, const std::string& source, TokenizerConfig& cfg) {
  struct Field {
    const char* key;
    std::optional<AddedToken>* dst;
  };
  const Field fields[] = {{"bos_token", &cfg.bos_token},
                          {"eos_token", &cfg.eos_token},
                          {"unk_token", &cfg.unk_token},
                          {"pad_token", &cfg.pad_token}};
  for (const Field& f : fields) {
    QS_ASSIGN_OR_RETURN(std::optional<AddedToken> token, special_token_field(obj, f.key, source));
    if (token) *f.dst = std::move(token);
  }
  auto it = obj.find("additional_special_tokens");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_array()) {
      return invalid_argument(source + ": \"additional_special_tokens\" must be a list");
    }
    cfg.additional_special_tokens.clear();
    for (size_t i = 0; i < it->size(); ++i) {
      QS_ASSIGN_OR_RETURN(AddedToken token,
                          parse_added_token((*it)[i], source + ": additional_special_tokens[" +
                                                          std::to_string(i) + "]"));
      token.special = true;
      cfg.additional_special_tokens.push_back(std::move(token));
    }
  }
  return ok_status();
}

Result<json> parse_json_object(std::string_view text, const std::string& name) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(name + " is not valid JSON");
  if (!j.is_object()) return invalid_argument(name + " must hold a JSON object");
  return j;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool is_word_byte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c >= 0x80;
}

}  // namespace

Result<AddedToken> parse_added_token(const json& j, const std::string& where) {
  AddedToken token;
  if (j.is_string()) {
    token.content = j.get<std::string>();
  } else if (j.is_object()) {
    auto content = j.find("content");
    if (content == j.end() || !content->is_string()) {
      return invalid_argument(where + ": an AddedToken needs a string \"content\"");
    }
    token.content = content->get<std::string>();
    struct Flag {
      const char* key;
      bool* dst;
    };
    const Flag flags[] = {{"special", &token.special},
                          {"lstrip", &token.lstrip},
                          {"rstrip", &token.rstrip},
                          {"single_word", &token.single_word},
                          {"normalized", &token.normalized}};
    for (const Flag& f : flags) {
      QS_ASSIGN_OR_RETURN(std::optional<bool> v, optional_bool(j, f.key, where));
      if (v) *f.dst = *v;
    }
    auto id = j.find("id");
    if (id != j.end()) {
      if (!id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX) {
        return invalid_argument(where + ": \"id\" must be a non-negative integer, found " +
                                id->dump());
      }
      token.id = static_cast<int32_t>(id->get<int64_t>());
    }
  } else {
    return invalid_argument(where + ": expected a string or an AddedToken object, found " +
                            j.dump());
  }
  if (token.content.empty()) return invalid_argument(where + ": token content is empty");
  return token;
}

Result<TokenizerConfig> parse_tokenizer_config(std::string_view tokenizer_config_json,
                                               std::string_view special_tokens_map_json,
                                               const std::string& source) {
  TokenizerConfig cfg;
  // special_tokens_map.json first so that tokenizer_config.json overrides it.
  if (!special_tokens_map_json.empty()) {
    const std::string name = source + "/special_tokens_map.json";
    QS_ASSIGN_OR_RETURN(json map, parse_json_object(special_tokens_map_json, name));
    QS_RETURN_IF_ERROR(apply_special_tokens(map, name, cfg));
  }
  if (tokenizer_config_json.empty()) return cfg;

  const std::string name = source + "/tokenizer_config.json";
  QS_ASSIGN_OR_RETURN(json j, parse_json_object(tokenizer_config_json, name));
  QS_RETURN_IF_ERROR(apply_special_tokens(j, name, cfg));
  QS_ASSIGN_OR_RETURN(cfg.add_bos_token, optional_bool(j, "add_bos_token", name));
  QS_ASSIGN_OR_RETURN(cfg.add_eos_token, optional_bool(j, "add_eos_token", name));
  QS_ASSIGN_OR_RETURN(cfg.legacy, optional_bool(j, "legacy", name));
  QS_ASSIGN_OR_RETURN(cfg.add_prefix_space, optional_bool(j, "add_prefix_space", name));
  auto cls = j.find("tokenizer_class");
  if (cls != j.end() && cls->is_string()) cfg.tokenizer_class = cls->get<std::string>();

  auto decoder = j.find("added_tokens_decoder");
  if (decoder != j.end() && !decoder->is_null()) {
    if (!decoder->is_object()) {
      return invalid_argument(name + ": \"added_tokens_decoder\" must map ids to tokens");
    }
    for (auto it = decoder->begin(); it != decoder->end(); ++it) {
      const std::string& key = it.key();
      int32_t id = -1;
      auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
        return invalid_argument(name + ": added_tokens_decoder key \"" + key +
                                "\" is not a token id");
      }
      QS_ASSIGN_OR_RETURN(
          AddedToken token,
          parse_added_token(it.value(), name + ": added_tokens_decoder[" + key + "]"));
      token.id = id;
      cfg.added_tokens.push_back(std::move(token));
    }
    std::sort(cfg.added_tokens.begin(), cfg.added_tokens.end(),
              [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  }
  return cfg;
}

Result<TokenizerConfig> read_tokenizer_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string files[2];
  const char* names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
  for (int i = 0; i < 2; ++i) {
    const std::string path = (fs::path(dir) / names[i]).string();
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    QS_ASSIGN_OR_RETURN(files[i], read_file(path));
    if (files[i].empty()) return invalid_argument(path + " is empty");
  }
  return parse_tokenizer_config(files[0], files[1], dir);
}

AddedTokenSplitter::AddedTokenSplitter(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), by_byte_(256) {
  // Longest first, so the first match found at a position is the longest one.
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(static_cast<int>(i));
  }
}

std::vector<TextSegment> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<TextSegment> out;
  size_t text_start = 0;  // start of the pending plain-text run
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    if (!tokens_.empty()) {
      for (int idx : by_byte_[static_cast<unsigned char>(text[pos])]) {
        const AddedToken& t = tokens_[idx];
        if (text.compare(pos, t.content.size(), t.content) != 0) continue;
        if (t.single_word) {
          const size_t end = pos + t.content.size();
          const bool word_before = pos > 0 && is_word_byte(text[pos - 1]);
          const bool word_after = end < text.size() && is_word_byte(text[end]);
          if (word_before || word_after) continue;
        }
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t run_end = pos;
    if (match->lstrip) {
      while (run_end > text_start && is_space(text[run_end - 1])) --run_end;
    }
    if (run_end > text_start) {
      out.push_back({text.substr(text_start, run_end - text_start), text_start, -1});
    }
    out.push_back({text.substr(pos, match->content.size()), pos, match->id});
    pos += match->content.size();
    if (match->rstrip) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
    }
    text_start = pos;
  }
  if (text_start < text.size()) {
    out.push_back({text.substr(text_start), text_start, -1});
  }
  return out;
}

}  // namespace qs::tok
