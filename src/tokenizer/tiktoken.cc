// tokenizer: tiktoken rank files and Meta's Llama-3 tokenizer (see tiktoken.h).
#include "tokenizer/tiktoken.h"

#include <array>
#include <charconv>

#include "core/mmap_file.h"
#include "tokenizer/byte_level.h"

namespace qs::tok {
namespace {

// Standard base64 (RFC 4648, with '=' padding), as tiktoken's load_tiktoken_bpe reads it.
bool base64_decode(std::string_view in, std::string* out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size() - pad; ++i) {
    const int8_t v = table[static_cast<uint8_t>(in[i])];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

}  // namespace

bool looks_like_tiktoken(std::string_view head) {
  const size_t nl = head.find('\n');
  std::string_view line = head.substr(0, nl);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return false;
  std::string bytes;
  if (!base64_decode(line.substr(0, space), &bytes)) return false;
  const std::string_view rank = line.substr(space + 1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), value);
  return ec == std::errc() && end == rank.data() + rank.size();
}

namespace {

// The ranks of `path` as a model (merges derived, ignore_merges on).
Result<BpeModel> read_tiktoken_model(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
  BpeModel model;
  size_t pos = 0;
  size_t line_no = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) {
      return data_loss(where + ": expected \"<base64 token> <rank>\", found \"" +
                       std::string(line.substr(0, 80)) + "\"");
    }
    if (!base64_decode(line.substr(0, space), &bytes)) {
      return data_loss(where + ": token is not valid base64");
    }
    const std::string_view rank_text = line.substr(space + 1);
    int32_t rank = -1;
    auto [rank_end, ec] =
        std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || rank_end != rank_text.data() + rank_text.size() || rank < 0) {
      return data_loss(where + ": rank \"" + std::string(rank_text) +
                       "\" is not a non-negative integer");
    }
    Status st = model.add_token(rank, bytes, byte_level_encode(bytes));
    if (!st.ok()) return st.with_context(where);
  }
  if (model.n_tokens() == 0) return data_loss(path + ": no ranks in the file");
  model.finish_tokens();
  model.derive_merges_from_ranks();
  model.set_ignore_merges(true);
  return model;
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> load_tiktoken(const std::string& path,
                                                    const BpeFileOptions& options) {
  if (options.ignore_merges.has_value() && !*options.ignore_merges) {
    return invalid_argument(path +
                            ": tiktoken ranks always map whole tokens directly; "
                            "ignore_merges = false is not supported for them");
  }
  for (const AddedToken& a : options.added_tokens) {
    if (a.id < 0) return invalid_argument("added token \"" + a.content + "\" has no id");
  }
  QS_ASSIGN_OR_RETURN(BpeModel model, read_tiktoken_model(path));
  QS_ASSIGN_OR_RETURN(Pretokenizer pre, Pretokenizer::for_kind(options.pretokenizer));
  auto tok = std::make_unique<BpeTokenizer>(std::move(model), std::move(pre), options.added_tokens);
  tok->set_nfc(options.nfc.value_or(false));
  return tok;
}

std::vector<AddedToken> llama3_special_tokens(int32_t first_id) {
  std::vector<std::string> names = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|reserved_special_token_2|>",
      "<|reserved_special_token_3|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|reserved_special_token_4|>",
      "<|eot_id|>",
  };
  // Meta: range(5, num_reserved_special_tokens - 5) with 256 reserved, i.e. 5..250, which
  // brings the total to exactly 256.
  constexpr int kNumReserved = 256;
  for (int i = 5; i < kNumReserved - 5; ++i) {
    names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  }
  std::vector<AddedToken> out;
  out.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    AddedToken a;
    a.id = first_id + static_cast<int32_t>(i);
    a.content = std::move(names[i]);
    a.special = true;
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::unique_ptr<BpeTokenizer>> load_llama3_tiktoken(const std::string& path) {
  QS_ASSIGN_OR_RETURN(BpeModel model, read_tiktoken_model(path));
  // Meta numbers the specials right after the ranks.
  std::vector<AddedToken> specials = llama3_special_tokens(model.id_end());
  QS_ASSIGN_OR_RETURN(Pretokenizer pre, Pretokenizer::for_kind(PretokenizerKind::kLlama3));
  auto tok = std::make_unique<BpeTokenizer>(std::move(model), std::move(pre), std::move(specials));
  QS_RETURN_IF_ERROR(tok->set_bos_token("<|begin_of_text|>"));
  QS_RETURN_IF_ERROR(tok->set_eos_token("<|end_of_text|>"));
  QS_RETURN_IF_ERROR(tok->set_add_bos(true));
  return tok;
}

}  // namespace qs::tok
