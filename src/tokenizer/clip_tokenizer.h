// tokenizer: CLIP's byte-level BPE (openai/clip-vit-large-patch14, FLUX.1's tokenizer/): text
// cleaned (NFC, whitespace runs -> one space, trimmed, lower-cased), cut by CLIP's regex into
// words, each word's last symbol marked "</w>" before the merges, then <|startoftext|> ...
// <|endoftext|> padded to a fixed length, as CLIPTokenizer(padding="max_length",
// truncation=True) returns it. Reads tokenizer.json (BPE with end_of_word_suffix "</w>") or
// vocab.json + merges.txt. Only encoding: the image pipeline never decodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/pretokenize.h"

namespace qs::tok {

class ClipTokenizer {
 public:
  static Result<std::unique_ptr<ClipTokenizer>> load(const std::string& dir);

  // [bos, tokens (cut to max_length - 2), eos, pad...], exactly max_length ids.
  std::vector<int32_t> encode_padded(std::string_view text, int64_t max_length) const;

  // The BPE tokens of one text, without the special tokens around it; encoding stops once
  // `max_tokens` are out (the pipeline keeps 75), and a word is cut at 4096 bytes, which
  // changes only tokens past the first few hundred of that word: a hostile prompt costs
  // bounded time (BPE is quadratic in the word length).
  std::vector<int32_t> encode(std::string_view text, size_t max_tokens = SIZE_MAX) const;

  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::map<std::pair<std::string, std::string>, int32_t> ranks_;
  std::unique_ptr<RegexSplitter> splitter_;
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
};

}  // namespace qs::tok
