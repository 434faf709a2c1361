// importers: GGUF vocabulary -> HF tokenizer files (see gguf_tokenizer.h).
#include "importers/gguf_tokenizer.h"

#include <filesystem>
#include <unordered_set>

#include "core/json.h"
#include "core/mmap_file.h"
#include "importers/llama2c_tokenizer.h"
#include "io/checkpoint.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

namespace qs::importers {

using io::GgufFile;
using tok::pretokenizer_pattern;
using tok::PretokenizerKind;
using tok::SpmModel;
using tok::SpmModelType;
using tok::SpmPieceType;
using tok::utf8_is_valid;

namespace {

using nlohmann::json;

// tokenizer.ggml.token_type values are SentencePiece's piece types.
constexpr int64_t kTypeNormal = 1, kTypeControl = 3, kTypeUserDefined = 4, kTypeByte = 6;

// GGUF strings are UTF-8 by the format; the tokenizer files written from them are JSON, which
// cannot hold anything else (nlohmann's dump throws on such a string), so a file that breaks
// the rule is refused here, naming the key and the entry.
Result<std::vector<std::string>> utf8_string_array(const io::GgufFile& g, const std::string& key) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> v, g.get_string_array(key));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!utf8_is_valid(v[i])) {
      return data_loss(g.path() + ": " + key + "[" + std::to_string(i) +
                       "] is not valid UTF-8 (GGUF strings are)");
    }
  }
  return v;
}

Result<std::string> utf8_string(const io::GgufFile& g, const std::string& key) {
  QS_ASSIGN_OR_RETURN(std::string v, g.get_string(key));
  if (!utf8_is_valid(v)) return data_loss(g.path() + ": " + key + " is not valid UTF-8");
  return v;
}

Result<int64_t> optional_id(const io::GgufFile& g, const std::string& key, int64_t n_tokens) {
  return g.get_token_id(key, n_tokens);
}

Result<std::vector<int64_t>> token_types(const io::GgufFile& g, size_t n_tokens) {
  if (!g.has("tokenizer.ggml.token_type")) return std::vector<int64_t>(n_tokens, kTypeNormal);
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> types, g.get_int_array("tokenizer.ggml.token_type"));
  if (types.size() != n_tokens) {
    return data_loss(g.path() + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                     " entries for " + std::to_string(n_tokens) + " tokens");
  }
  return types;
}

// The HF pre_tokenizer llama.cpp's tokenizer.ggml.pre stands for (llama-vocab.cpp's regexes).
Result<json> pre_tokenizer_for(const io::GgufFile& g) {
  std::string pre = "default";
  if (g.has("tokenizer.ggml.pre")) {
    QS_ASSIGN_OR_RETURN(pre, utf8_string(g, "tokenizer.ggml.pre"));
  }
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") return byte_level;
  if (pre == "smollm") {
    // "\p{N}" then GPT-2's regex: HF's Digits(individual) + ByteLevel.
    return json{{"type", "Sequence"},
                {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
  }
  if (pre == "llama-bpe" || pre == "llama3" || pre == "qwen2") {
    const auto kind = pre == "qwen2" ? PretokenizerKind::kQwen2 : PretokenizerKind::kLlama3;
    json no_regex = byte_level;
    no_regex["use_regex"] = false;
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", std::string(pretokenizer_pattern(kind))}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  no_regex}}};
  }
  return unimplemented(g.path() + ": tokenizer.ggml.pre '" + pre +
                       "' is not supported (default, gpt-2, smollm, llama-bpe, qwen2 are)");
}

json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// tokenizer_config.json entries shared by both vocabularies: special token strings, whether
// BOS is added, the chat template.
Result<json> common_config(const io::GgufFile& g, const std::vector<std::string>& tokens,
                           bool default_add_bos) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  json c = json::object();
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                   {"tokenizer.ggml.eos_token_id", "eos_token"},
                                   {"tokenizer.ggml.unknown_token_id", "unk_token"},
                                   {"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    QS_ASSIGN_OR_RETURN(int64_t id, optional_id(g, key, n));
    if (id >= 0) c[field] = tokens[id];
  }
  bool add_bos = default_add_bos;
  if (g.has("tokenizer.ggml.add_bos_token")) {
    QS_ASSIGN_OR_RETURN(add_bos, g.get_bool("tokenizer.ggml.add_bos_token"));
  }
  c["add_bos_token"] = add_bos && c.contains("bos_token");
  c["add_eos_token"] = false;
  if (g.has("tokenizer.chat_template")) {
    QS_ASSIGN_OR_RETURN(std::string t, utf8_string(g, "tokenizer.chat_template"));
    c["chat_template"] = t;
  }
  return c;
}

Status import_spm(const io::GgufFile& g, const std::vector<std::string>& tokens,
                  const std::string& out_dir) {
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> types, token_types(g, tokens.size()));
  std::vector<double> scores(tokens.size(), 0.0);
  if (g.has("tokenizer.ggml.scores")) {
    QS_ASSIGN_OR_RETURN(scores, g.get_float_array("tokenizer.ggml.scores"));
    if (scores.size() != tokens.size()) {
      return data_loss(g.path() + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                       " entries for " + std::to_string(tokens.size()) + " tokens");
    }
  }
  SpmModel m;
  m.model_type = SpmModelType::kBpe;
  // What llama.cpp's SPM tokenizer does with a "llama" vocabulary: identity normalization,
  // every space kept (as Llama 2's own tokenizer.model says), spaces escaped to U+2581.
  m.normalizer_name = "identity";
  m.remove_extra_whitespaces = false;
  m.escape_whitespaces = true;
  const int64_t n = static_cast<int64_t>(tokens.size());
  QS_ASSIGN_OR_RETURN(int64_t unk, optional_id(g, "tokenizer.ggml.unknown_token_id", n));
  QS_ASSIGN_OR_RETURN(int64_t bos, optional_id(g, "tokenizer.ggml.bos_token_id", n));
  QS_ASSIGN_OR_RETURN(int64_t eos, optional_id(g, "tokenizer.ggml.eos_token_id", n));
  QS_ASSIGN_OR_RETURN(int64_t pad, optional_id(g, "tokenizer.ggml.padding_token_id", n));
  int byte_pieces = 0;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] < 1 || types[i] > kTypeByte) {
      return data_loss(g.path() + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] is " +
                       std::to_string(types[i]));
    }
    if (!seen.insert(tokens[i]).second) {
      return data_loss(g.path() + ": token '" + tokens[i] + "' appears twice");
    }
    byte_pieces += types[i] == kTypeByte;
    // A vocabulary without an unknown id marks its <unk> by type only.
    if (unk < 0 && types[i] == static_cast<int64_t>(SpmPieceType::kUnknown)) {
      unk = static_cast<int64_t>(i);
    }
    m.pieces.push_back(
        {tokens[i], static_cast<float>(scores[i]), static_cast<SpmPieceType>(types[i])});
  }
  if (unk < 0) return data_loss(g.path() + ": no unknown token (SentencePiece needs one)");
  m.pieces[unk].type = SpmPieceType::kUnknown;
  m.unk_id = static_cast<int32_t>(unk);
  m.bos_id = static_cast<int32_t>(bos);
  m.eos_id = static_cast<int32_t>(eos);
  m.pad_id = static_cast<int32_t>(pad);
  m.unk_piece = tokens[unk];
  if (bos >= 0) m.bos_piece = tokens[bos];
  if (eos >= 0) m.eos_piece = tokens[eos];
  if (pad >= 0) m.pad_piece = tokens[pad];
  // sentencepiece accepts byte_fallback only with all 256 byte pieces present.
  m.byte_fallback = byte_pieces == 256;
  m.vocab_size = static_cast<int32_t>(n);
  if (g.has("tokenizer.ggml.add_space_prefix")) {
    QS_ASSIGN_OR_RETURN(m.add_dummy_prefix, g.get_bool("tokenizer.ggml.add_space_prefix"));
  }
  QS_ASSIGN_OR_RETURN(json extra, common_config(g, tokens, /*default_add_bos=*/true));
  return write_spm_tokenizer_files(m, extra, out_dir);
}

}  // namespace

Result<json> gguf_bpe_tokenizer_json(const io::GgufFile& g) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                      utf8_string_array(g, "tokenizer.ggml.tokens"));
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> types, token_types(g, tokens.size()));
  QS_ASSIGN_OR_RETURN(std::vector<std::string> merges,
                      utf8_string_array(g, "tokenizer.ggml.merges"));
  const int64_t n = static_cast<int64_t>(tokens.size());
  json vocab = json::object();
  json added = json::array();
  for (int64_t i = 0; i < n; ++i) {
    if (vocab.contains(tokens[i])) {
      return data_loss(g.path() + ": token '" + tokens[i] + "' appears twice");
    }
    vocab[tokens[i]] = i;
    if (types[i] == kTypeControl || types[i] == kTypeUserDefined) {
      added.push_back(added_token(i, tokens[i], types[i] == kTypeControl));
    }
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& mg = merges[i];
    const size_t sp = mg.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == mg.size() ||
        mg.find(' ', sp + 1) != std::string::npos) {
      return data_loss(g.path() + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" + mg +
                       "' is not two tokens separated by one space");
    }
  }
  QS_ASSIGN_OR_RETURN(json pre, pre_tokenizer_for(g));
  QS_ASSIGN_OR_RETURN(json config, common_config(g, tokens, /*default_add_bos=*/false));
  json post = {{"type", "ByteLevel"},
               {"add_prefix_space", true},
               {"trim_offsets", false},
               {"use_regex", true}};
  if (config["add_bos_token"].get<bool>()) {
    // HF spells "prepend BOS" as a TemplateProcessing around the sequence.
    const std::string bos = config["bos_token"];
    QS_ASSIGN_OR_RETURN(int64_t bos_id, optional_id(g, "tokenizer.ggml.bos_token_id", n));
    post = {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  }
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  if (config.contains("unk_token")) model["unk_token"] = config["unk_token"];
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre},
              {"post_processor", post},
              {"decoder",
               {{"type", "ByteLevel"},
                {"add_prefix_space", true},
                {"trim_offsets", true},
                {"use_regex", true}}},
              {"model", model}};
}

Status import_gguf_tokenizer(const io::GgufFile& g, const std::string& out_dir) {
  namespace fs = std::filesystem;
  QS_ASSIGN_OR_RETURN(std::string kind, g.get_string("tokenizer.ggml.model"));
  QS_ASSIGN_OR_RETURN(std::vector<std::string> tokens,
                      utf8_string_array(g, "tokenizer.ggml.tokens"));
  if (tokens.empty()) return data_loss(g.path() + ": tokenizer.ggml.tokens is empty");
  if (kind == "llama") return import_spm(g, tokens, out_dir);
  if (kind != "gpt2") {
    return unimplemented(g.path() + ": tokenizer.ggml.model '" + kind +
                         "' is not supported (gpt2 and llama are)");
  }
  QS_ASSIGN_OR_RETURN(json tokenizer, gguf_bpe_tokenizer_json(g));
  QS_ASSIGN_OR_RETURN(json config, common_config(g, tokens, false));
  json decoder = json::object();
  for (const json& a : tokenizer["added_tokens"]) {
    json entry = a;
    entry.erase("id");
    decoder[std::to_string(a["id"].get<int64_t>())] = entry;
  }
  config["added_tokens_decoder"] = decoder;
  config["tokenizer_class"] = "GPT2Tokenizer";
  config["clean_up_tokenization_spaces"] = false;
  json map = json::object();
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (config.contains(k)) map[k] = config[k];
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": cannot create directory: " + ec.message());
  const fs::path dir(out_dir);
  QS_RETURN_IF_ERROR(write_json((dir / "tokenizer.json").string(), tokenizer));
  QS_RETURN_IF_ERROR(write_json((dir / "tokenizer_config.json").string(), config));
  return write_json((dir / "special_tokens_map.json").string(), map);
}

}  // namespace qs::importers
