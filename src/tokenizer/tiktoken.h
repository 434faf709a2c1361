// tokenizer: tiktoken rank files ("<base64 token> <rank>" per line, e.g. Llama-3's
// tokenizer.model) as byte-level BPE, plus Meta's Llama-3 special tokens. A token's rank is
// its id and its merge priority, exactly as in tiktoken's _byte_pair_merge.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {

// Whether the first bytes of a file look like tiktoken ranks (so a loader can tell Llama-3's
// tokenizer.model from a SentencePiece protobuf of the same name).
bool looks_like_tiktoken(std::string_view head);

// Reads the ranks; options.pretokenizer picks the regex (tiktoken files do not carry it),
// options.added_tokens the specials. ignore_merges is always on (tiktoken looks a whole
// piece up first); options.ignore_merges must not say otherwise.
Result<std::unique_ptr<BpeTokenizer>> load_tiktoken(const std::string& path,
                                                    const BpeFileOptions& options);

// Meta's Llama-3 special tokens (llama/tokenizer.py): 256 tokens numbered from `first_id`
// (= the number of ranks, 128000): <|begin_of_text|>, <|end_of_text|>,
// <|reserved_special_token_0..3|>, <|start_header_id|>, <|end_header_id|>,
// <|reserved_special_token_4|>, <|eot_id|>, then <|reserved_special_token_5..250|>.
std::vector<AddedToken> llama3_special_tokens(int32_t first_id);

// Meta's Llama-3 tokenizer from its tokenizer.model: Llama-3 regex, the specials above after
// the last rank, BOS <|begin_of_text|> added by encode(..., true), EOS <|end_of_text|>.
Result<std::unique_ptr<BpeTokenizer>> load_llama3_tiktoken(const std::string& path);

}  // namespace qs::tok
