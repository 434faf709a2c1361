// tokenizer: SentencePiece Unigram from a tokenizer.json (T5's, FLUX.1's tokenizer_2/): words
// split on whitespace, each prefixed with "▁" (Metaspace), then cut into the pieces of highest
// total log-probability (Viterbi); a character no piece covers becomes <unk> at the lowest
// score minus 10, consecutive <unk>s fused, as HF tokenizers' Unigram does. "</s>" closes the
// sequence (TemplateProcessing), then <pad> fills it to a fixed length, as T5TokenizerFast
// (padding="max_length", truncation=True). Only encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace qs::tok {

class UnigramTokenizer {
 public:
  static Result<std::unique_ptr<UnigramTokenizer>> load(const std::string& dir);

  // [tokens (cut to max_length - 1), eos, pad...], exactly max_length (>= 1) ids.
  Result<std::vector<int32_t>> encode_padded(std::string_view text, int64_t max_length) const;
  // The pieces' ids of one text, without </s>; encoding stops at the word that brings the count
  // to `max_tokens` (the ids before that are the same), so a long prompt costs what is kept.
  Result<std::vector<int32_t>> encode(std::string_view text, size_t max_tokens = SIZE_MAX) const;

  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int64_t vocab_size() const { return static_cast<int64_t>(scores_.size()); }

 private:
  // The pieces as a byte trie: the Viterbi walks it from each position, so a word costs its
  // length times the longest piece matching there, with no substring built per candidate.
  int32_t child(int32_t node, uint8_t byte) const;
  std::vector<int32_t> node_piece_;              // node -> piece id, or -1; node 0 is the root
  std::unordered_map<uint64_t, int32_t> edges_;  // node << 8 | byte -> child node
  std::vector<double> scores_;
  double unk_score_ = 0;
  int32_t unk_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  // The T5 tokenizer.json's Precompiled normalizer (nmt_nfkc) is not implemented; it is the
  // identity on printable ASCII, so such files are accepted and other text is refused.
  bool ascii_only_ = false;
  bool collapse_spaces_ = false;  // Replace(" {2,}", " ")
};

}  // namespace qs::tok
