// tokenizer: byte-level BPE tokenizers (GPT-2, Llama-3, Qwen2 families) behind the Tokenizer
// interface, and the constructors the loader calls for each file form: HF tokenizer.json,
// vocab.json + merges.txt (GPT-2 encoder.json + vocab.bpe is the same form), and tiktoken
// rank files (tiktoken.h). Promise: the ids HF `tokenizers` / tiktoken give for the same
// files, and decode(encode(x)) == x for every valid UTF-8 x.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {

class BpeTokenizer final : public Tokenizer {
 public:
  // `added` need ids >= 0; they may reuse a regular id (GPT-2's <|endoftext|> is both).
  BpeTokenizer(BpeModel model, Pretokenizer pretokenizer, std::vector<AddedToken> added);

  // Tokenizer. encode: added tokens are cut out first (leftmost-longest), the rest is
  // pre-tokenized and merged; add_special_tokens wraps the result in the prefix/suffix ids
  // (BOS and friends, see set_add_bos). Bytes that are not UTF-8 are encoded as byte tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  // Unknown ids are skipped; invalid UTF-8 in the joined bytes becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override;
  bool is_special(int32_t id) const override;
  std::string id_to_piece(int32_t id) const override;
  int32_t piece_to_id(std::string_view piece) const override;

  // Settings that live outside the vocabulary files (tokenizer_config.json, model family).
  // The token must exist (added or regular) or a NotFound status comes back.
  Status set_bos_token(std::string_view content);
  Status set_eos_token(std::string_view content);
  // Whether encode(..., add_special_tokens = true) puts bos/eos around the ids. Needs the
  // token set first (InvalidArgument otherwise).
  Status set_add_bos(bool add);
  Status set_add_eos(bool add);
  // HF TemplateProcessing "single": ids before and after the text.
  void set_template(std::vector<int32_t> prefix, std::vector<int32_t> suffix);
  // NFC-normalize text between added tokens before pre-tokenizing (HF normalizer "NFC";
  // Qwen2Tokenizer does the same).
  void set_nfc(bool nfc) { nfc_ = nfc; }

  const BpeModel& model() const { return model_; }
  // The pre-token pieces `text` (without added tokens) is cut into; for tests and tools.
  std::vector<std::string> pretokenize(std::string_view text) const;

 private:
  const AddedToken* added_of(int32_t id) const;

  BpeModel model_;
  Pretokenizer pretokenizer_;
  AddedTokenSplitter splitter_;
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> prefix_ids_;  // put before the text when add_special_tokens
  std::vector<int32_t> suffix_ids_;  // ... and after it
  bool nfc_ = false;
};

// How to read files that do not describe their own pre-tokenizer or special tokens
// (vocab.json + merges.txt, tiktoken ranks).
struct BpeFileOptions {
  PretokenizerKind pretokenizer = PretokenizerKind::kGpt2;
  // Map a pre-token that is a whole token straight to it (HF ignore_merges). Unset: true for
  // kLlama3 (its HF tokenizer.json sets it; one llama.cpp case, "Cửa Việt", needs it), false
  // otherwise. tiktoken files always behave as if true, as tiktoken itself does.
  std::optional<bool> ignore_merges;
  // Added/special tokens with their ids, e.g. TokenizerConfig::added_tokens.
  std::vector<AddedToken> added_tokens;
  // NFC-normalize the text first. Unset: true for kQwen2 (Qwen2Tokenizer and Qwen2's
  // tokenizer.json both do), false otherwise.
  std::optional<bool> nfc;
};

// HF tokenizer.json whose model is byte-level BPE: model.type "BPE" with vocab, merges ("a b"
// strings or [a, b] pairs), ignore_merges, unk_token; pre_tokenizer ByteLevel / Split (Regex
// or String) / Digits / Sequence of them; added_tokens; post_processor TemplateProcessing
// (sets the prefix/suffix ids and BOS), ByteLevel, Sequence; normalizer none or NFC.
// Anything else, including SentencePiece-style BPE (Metaspace, byte_fallback), is
// Unimplemented. `where` names the source in messages.
Result<std::unique_ptr<BpeTokenizer>> load_bpe_tokenizer_json(const nlohmann::json& j,
                                                              const std::string& where);
// The same from a file path.
Result<std::unique_ptr<BpeTokenizer>> load_bpe_tokenizer_json_file(const std::string& path);

// vocab.json (token text -> id) + merges.txt (one "a b" merge per line, optional
// "#version" first line, LF or CRLF), e.g. Qwen2's vocab.json + merges.txt or GPT-2's
// encoder.json + vocab.bpe.
Result<std::unique_ptr<BpeTokenizer>> load_bpe_vocab_merges(const std::string& vocab_path,
                                                            const std::string& merges_path,
                                                            const BpeFileOptions& options);

}  // namespace qs::tok
