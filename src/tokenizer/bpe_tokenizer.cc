// tokenizer: the byte-level BPE tokenizer and its vocab.json + merges.txt loader (see
// bpe_tokenizer.h; the tokenizer.json loader is in bpe_tokenizer_json.cc).
#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"
#include "tokenizer/utf8.h"
#include "tokenizer/utf8_nfc.h"

namespace qs::tok {

BpeTokenizer::BpeTokenizer(BpeModel model, Pretokenizer pretokenizer, std::vector<AddedToken> added)
    : model_(std::move(model)), pretokenizer_(std::move(pretokenizer)) {
  vocab_size_ = model_.id_end();
  for (const AddedToken& a : added) {
    // A later entry for the same id replaces an earlier one, so a caller can append the
    // more specific source (e.g. tokenizer_config.json) after the general one.
    added_by_id_[a.id] = a;
    vocab_size_ = std::max(vocab_size_, a.id + 1);
  }
  std::vector<AddedToken> unique;
  unique.reserve(added_by_id_.size());
  for (const auto& [id, a] : added_by_id_) {
    added_by_content_.emplace(a.content, id);
    unique.push_back(a);
  }
  // The splitter resolves equal lengths by order, so give it a fixed one.
  std::sort(unique.begin(), unique.end(),
            [](const AddedToken& x, const AddedToken& y) { return x.id < y.id; });
  splitter_ = AddedTokenSplitter(std::move(unique));
}

const AddedToken* BpeTokenizer::added_of(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &it->second;
}

std::vector<std::string> BpeTokenizer::pretokenize(std::string_view text) const {
  return pretokenizer_.run(text);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 1);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  for (const TextSegment& seg : splitter_.split(text)) {
    if (seg.token_id >= 0) {
      ids.push_back(seg.token_id);
      continue;
    }
    const std::vector<std::string> pieces =
        nfc_ ? pretokenizer_.run(utf8_nfc(seg.text)) : pretokenizer_.run(seg.text);
    for (const std::string& piece : pieces) model_.encode_piece(piece, &ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (const AddedToken* a = added_of(id)) return a->content;
  if (model_.has_id(id)) return model_.bytes_of(id);
  return "";
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (const AddedToken* a = added_of(id)) {
      if (!(skip_special && a->special)) bytes += a->content;
    } else if (model_.has_id(id)) {
      bytes += model_.bytes_of(id);
    }
  }
  return utf8_make_valid(bytes);
}

int32_t BpeTokenizer::vocab_size() const {
  return vocab_size_;
}

bool BpeTokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_of(id);
  return a != nullptr && a->special;
}

std::string BpeTokenizer::id_to_piece(int32_t id) const {
  if (const AddedToken* a = added_of(id)) return a->content;
  if (model_.has_id(id)) return model_.piece_of(id);
  return "";
}

int32_t BpeTokenizer::piece_to_id(std::string_view piece) const {
  auto it = added_by_content_.find(std::string(piece));
  if (it != added_by_content_.end()) return it->second;
  return model_.find_piece(piece);
}

Status BpeTokenizer::set_bos_token(std::string_view content) {
  const int32_t id = piece_to_id(content);
  if (id < 0)
    return not_found("BOS token \"" + std::string(content) + "\" is not in the vocabulary");
  bos_id_ = id;
  bos_token_ = std::string(content);
  return ok_status();
}

Status BpeTokenizer::set_eos_token(std::string_view content) {
  const int32_t id = piece_to_id(content);
  if (id < 0)
    return not_found("EOS token \"" + std::string(content) + "\" is not in the vocabulary");
  eos_id_ = id;
  eos_token_ = std::string(content);
  return ok_status();
}

Status BpeTokenizer::set_add_bos(bool add) {
  if (add && bos_id_ < 0) return invalid_argument("add_bos_token is set but there is no BOS token");
  prefix_ids_.clear();
  if (add) prefix_ids_.push_back(bos_id_);
  return ok_status();
}

Status BpeTokenizer::set_add_eos(bool add) {
  if (add && eos_id_ < 0) return invalid_argument("add_eos_token is set but there is no EOS token");
  suffix_ids_.clear();
  if (add) suffix_ids_.push_back(eos_id_);
  return ok_status();
}

void BpeTokenizer::set_template(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  prefix_ids_ = std::move(prefix);
  suffix_ids_ = std::move(suffix);
}

Result<std::unique_ptr<BpeTokenizer>> load_bpe_vocab_merges(const std::string& vocab_path,
                                                            const std::string& merges_path,
                                                            const BpeFileOptions& options) {
  QS_ASSIGN_OR_RETURN(std::string vocab_text, read_file(vocab_path));
  nlohmann::json vocab_json;
  try {
    vocab_json = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    return data_loss(vocab_path + ": not valid JSON: " + e.what());
  }
  if (!vocab_json.is_object()) {
    return data_loss(vocab_path + ": expected an object mapping token text to id");
  }
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [piece, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return data_loss(vocab_path + ": token \"" + piece + "\" has id " + id.dump() +
                       ", expected a non-negative integer");
    }
    vocab.emplace_back(piece, static_cast<int32_t>(id.get<int64_t>()));
  }

  QS_ASSIGN_OR_RETURN(std::string merges_text, read_file(merges_path));
  std::vector<std::pair<std::string, std::string>> merges;
  size_t pos = 0;
  size_t line_no = 0;
  while (pos < merges_text.size()) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string::npos) end = merges_text.size();
    std::string_view line(merges_text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return data_loss(merges_path + ":" + std::to_string(line_no) +
                       ": expected two tokens separated by one space, found \"" +
                       std::string(line) + "\"");
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }

  QS_ASSIGN_OR_RETURN(BpeModel model,
                      build_byte_level_bpe(vocab, merges, vocab_path + " + " + merges_path));
  model.set_ignore_merges(
      options.ignore_merges.value_or(options.pretokenizer == PretokenizerKind::kLlama3));
  QS_ASSIGN_OR_RETURN(Pretokenizer pre, Pretokenizer::for_kind(options.pretokenizer));
  for (const AddedToken& a : options.added_tokens) {
    if (a.id < 0) {
      return invalid_argument("added token \"" + a.content + "\" for " + vocab_path + " has no id");
    }
  }
  auto tok = std::make_unique<BpeTokenizer>(std::move(model), std::move(pre), options.added_tokens);
  tok->set_nfc(options.nfc.value_or(options.pretokenizer == PretokenizerKind::kQwen2));
  return tok;
}

}  // namespace qs::tok
