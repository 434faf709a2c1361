// tokenizer: the interface every tokenizer implements (byte-level BPE, SentencePiece), and the
// loader that picks one from a checkpoint directory. Knows nothing about models.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::tok {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text -> ids. Special/added tokens written literally in `text` (e.g. "<|im_end|>") map to
  // their ids, as HF does. `add_bos` prepends the BOS id when the tokenizer has one and
  // tokenizer_config.json asks for it (add_bos_token); the caller decides per use.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;

  // The raw bytes one token stands for (byte-level BPE bytes decoded, SPM "▁" -> " ",
  // <0xAB> byte pieces -> that byte). May be part of a UTF-8 character.
  virtual std::string token_bytes(int32_t id) const = 0;

  // Ids -> text, as HF's decode: special tokens dropped when skip_special; SPM drops the
  // space of its dummy prefix at the start. Invalid UTF-8 is replaced by U+FFFD.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // The token's text as stored in the vocabulary (for added tokens, their content).
  virtual std::string id_to_piece(int32_t id) const = 0;
  // -1 when the vocabulary has no such token.
  virtual int32_t piece_to_id(std::string_view piece) const = 0;

  int32_t bos_id() const { return bos_id_; }  // -1 if none
  int32_t eos_id() const { return eos_id_; }  // -1 if none
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 protected:
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::string bos_token_;
  std::string eos_token_;
};

// Loads the tokenizer of an HF checkpoint directory: tokenizer.json, else vocab.json +
// merges.txt, else tokenizer.model (SentencePiece or tiktoken ranks), with special tokens and
// BOS/EOS from tokenizer_config.json / special_tokens_map.json.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_dir);

}  // namespace qs::tok
