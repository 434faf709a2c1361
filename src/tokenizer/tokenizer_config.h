// tokenizer: what HF's tokenizer_config.json / special_tokens_map.json / tokenizer.json say
// about special and added tokens (BOS/EOS as strings or AddedToken dicts, add_bos_token,
// added_tokens_decoder), and the splitter that cuts text at added tokens the way HF does
// before the model tokenizer sees it. Shared by every tokenizer implementation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::tok {

// HF's AddedToken. `id` is -1 where the file names the token without an id (bos_token etc.).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // swallow whitespace before the token
  bool rstrip = false;       // swallow whitespace after the token
  bool single_word = false;  // match only where not inside a word
  bool normalized = false;
};

// Unset optionals mean "the file does not say"; each tokenizer applies its own default
// (LlamaTokenizer: add_bos_token true, GPT-2 style: false).
struct TokenizerConfig {
  std::optional<AddedToken> bos_token;
  std::optional<AddedToken> eos_token;
  std::optional<AddedToken> unk_token;
  std::optional<AddedToken> pad_token;
  std::vector<AddedToken> additional_special_tokens;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  std::optional<bool> legacy;            // LlamaTokenizer: dummy prefix after special tokens
  std::optional<bool> add_prefix_space;  // LlamaTokenizer (newer): dummy prefix at all
  std::string tokenizer_class;
  // From added_tokens_decoder (tokenizer_config.json), sorted by id.
  std::vector<AddedToken> added_tokens;
};

// Parses one AddedToken: a plain string (content only) or a dict with "content" and the
// flags. `where` names the field in messages. `null` is allowed by the caller, not here.
Result<AddedToken> parse_added_token(const nlohmann::json& j, const std::string& where);

// Reads `dir`/tokenizer_config.json and `dir`/special_tokens_map.json; either or both may be
// missing (then the result is empty). Values from tokenizer_config.json win.
Result<TokenizerConfig> read_tokenizer_config(const std::string& dir);
// The same from file contents (empty string = file absent), for tests and callers that
// already hold the text. `source` names the directory in messages.
Result<TokenizerConfig> parse_tokenizer_config(std::string_view tokenizer_config_json,
                                               std::string_view special_tokens_map_json,
                                               const std::string& source);

// A run of text, or one added token found in it.
struct TextSegment {
  std::string_view text;  // the original bytes (the token's content for a token)
  size_t offset = 0;      // byte offset of `text` in the input
  int32_t token_id = -1;  // >= 0: this segment is the added token with that id
};

// Cuts text at added tokens: leftmost match first, the longest token where several start at
// the same byte (HF's trie / aho-corasick LeftmostLongest). lstrip/rstrip swallow the
// neighbouring whitespace, single_word only matches outside words. Tokens need ids >= 0.
class AddedTokenSplitter {
 public:
  AddedTokenSplitter() = default;
  explicit AddedTokenSplitter(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // Text segments are never empty; token segments keep their order.
  std::vector<TextSegment> split(std::string_view text) const;

 private:
  std::vector<AddedToken> tokens_;         // sorted by content length, longest first
  std::vector<std::vector<int>> by_byte_;  // first byte -> indices into tokens_
};

}  // namespace qs::tok
