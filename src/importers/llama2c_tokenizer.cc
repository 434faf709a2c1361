// importers: llama2.c tokenizer.bin -> SentencePiece tokenizer.model + HF tokenizer config
// (see llama2c_tokenizer.h).
#include "importers/llama2c_tokenizer.h"

#include <cstring>
#include <filesystem>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "tokenizer/utf8.h"

namespace qs::importers {

using tok::kMetaspace;
using tok::serialize_spm_model;
using tok::SpmModel;
using tok::SpmModelType;
using tok::SpmPiece;
using tok::SpmPieceType;
using tok::utf8_is_valid;
namespace {

bool is_byte_piece(std::string_view s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.substr(0, 3) == "<0x" && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

std::string spaces_to_metaspace(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ') {
      out.append(kMetaspace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

nlohmann::json special_added_token(const std::string& content) {
  return {{"content", content}, {"lstrip", false},      {"normalized", false},
          {"rstrip", false},    {"single_word", false}, {"special", true}};
}

}  // namespace

Result<SpmModel> read_llama2c_tokenizer(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::string data, read_file(path));
  if (data.size() < 4) return data_loss(path + ": too short for a llama2.c tokenizer");
  int32_t max_token_length;
  std::memcpy(&max_token_length, data.data(), 4);
  if (max_token_length <= 0) {
    return data_loss(path + ": max_token_length is " + std::to_string(max_token_length) +
                     ", not a llama2.c tokenizer");
  }

  SpmModel m;
  m.model_type = SpmModelType::kBpe;
  m.normalizer_name = "identity";
  m.add_dummy_prefix = true;
  m.remove_extra_whitespaces = false;  // llama2.c keeps every space, as Llama 2's model does
  m.escape_whitespaces = true;
  m.unk_id = m.bos_id = m.eos_id = m.pad_id = -1;

  std::unordered_set<std::string> seen;
  size_t pos = 4;
  int byte_pieces = 0;
  while (pos < data.size()) {
    const int32_t id = static_cast<int32_t>(m.pieces.size());
    const std::string where =
        path + ": token " + std::to_string(id) + " at byte " + std::to_string(pos);
    if (data.size() - pos < 8) return data_loss(where + ": record header is truncated");
    float score;
    int32_t len;
    std::memcpy(&score, data.data() + pos, 4);
    std::memcpy(&len, data.data() + pos + 4, 4);
    pos += 8;
    if (len <= 0 || static_cast<size_t>(len) > data.size() - pos) {
      return data_loss(where + ": length " + std::to_string(len) + " does not fit the file");
    }
    const std::string_view raw(data.data() + pos, len);
    pos += len;
    if (!utf8_is_valid(raw)) return data_loss(where + ": token text is not valid UTF-8");

    SpmPiece p;
    p.score = score;
    if (raw == "<unk>") {
      p.piece = "<unk>";
      p.type = SpmPieceType::kUnknown;
      if (m.unk_id < 0) m.unk_id = id;
    } else if (raw == "\n<s>\n") {
      p.piece = "<s>";
      p.type = SpmPieceType::kControl;
      m.bos_id = id;
    } else if (raw == "\n</s>\n") {
      p.piece = "</s>";
      p.type = SpmPieceType::kControl;
      m.eos_id = id;
    } else if (is_byte_piece(raw)) {
      p.piece = std::string(raw);
      p.type = SpmPieceType::kByte;
      ++byte_pieces;
    } else {
      p.piece = spaces_to_metaspace(raw);
      p.type = SpmPieceType::kNormal;
    }
    if (!seen.insert(p.piece).second) {
      return data_loss(where + ": piece \"" + p.piece + "\" appears twice");
    }
    m.pieces.push_back(std::move(p));
  }
  if (m.unk_id < 0) return data_loss(path + ": no <unk> token (SentencePiece needs one)");
  // sentencepiece accepts byte_fallback only with all 256 byte pieces present.
  m.byte_fallback = byte_pieces == 256;
  m.vocab_size = static_cast<int32_t>(m.pieces.size());
  return m;
}

Status write_spm_tokenizer_files(const SpmModel& model, const nlohmann::json& extra_config,
                                 const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": cannot create directory: " + ec.message());

  const fs::path dir(out_dir);
  QS_RETURN_IF_ERROR(write_file((dir / "tokenizer.model").string(), serialize_spm_model(model)));

  nlohmann::json map = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::object();
  auto name = [&](int32_t id) { return model.pieces[id].piece; };
  added[std::to_string(model.unk_id)] = special_added_token(name(model.unk_id));
  map["unk_token"] = name(model.unk_id);
  if (model.bos_id >= 0) {
    added[std::to_string(model.bos_id)] = special_added_token(name(model.bos_id));
    map["bos_token"] = name(model.bos_id);
  }
  if (model.eos_id >= 0) {
    added[std::to_string(model.eos_id)] = special_added_token(name(model.eos_id));
    map["eos_token"] = name(model.eos_id);
  }
  nlohmann::json config = map;
  config["tokenizer_class"] = "LlamaTokenizer";
  config["add_bos_token"] = model.bos_id >= 0;
  config["add_eos_token"] = false;
  config["added_tokens_decoder"] = added;
  // SentencePiece's encoder puts a dummy prefix on every run of text.
  config["legacy"] = true;
  config["clean_up_tokenization_spaces"] = false;
  config["pad_token"] = nullptr;
  config["sp_model_kwargs"] = nlohmann::json::object();
  for (const auto& [key, value] : extra_config.items()) config[key] = value;

  QS_RETURN_IF_ERROR(write_file((dir / "tokenizer_config.json").string(), config.dump(2) + "\n"));
  QS_RETURN_IF_ERROR(write_file((dir / "special_tokens_map.json").string(), map.dump(2) + "\n"));
  return ok_status();
}

Status import_llama2c_tokenizer(const std::string& tok_bin_path, const std::string& out_dir) {
  QS_ASSIGN_OR_RETURN(SpmModel model, read_llama2c_tokenizer(tok_bin_path));
  return write_spm_tokenizer_files(model, nlohmann::json::object(), out_dir);
}

}  // namespace qs::importers
