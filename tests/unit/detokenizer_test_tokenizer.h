// tests: a small in-memory Tokenizer for the engine's streaming tests. Pieces are raw bytes
// (so a multi-byte character can be split over byte tokens); in SentencePiece mode "▁" is a
// space and decode drops the leading space of the first token, as HF's Strip decoder does.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qs::testing {

// Invalid or truncated UTF-8 sequences become one U+FFFD each, like Python's
// bytes.decode(errors="replace") on the maximal valid prefix.
inline std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xE  ? 3
                       : (c >> 3) == 0x1E ? 4
                                          : 0;
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t n_cont = 0;
    while (n_cont + 1 < len && i + 1 + n_cont < s.size() &&
           (static_cast<unsigned char>(s[i + 1 + n_cont]) & 0xC0) == 0x80) {
      ++n_cont;
    }
    if (n_cont + 1 == len) {
      out.append(s.substr(i, len));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += 1 + n_cont;
  }
  return out;
}

class FakeTokenizer : public tok::Tokenizer {
 public:
  FakeTokenizer(std::vector<std::string> pieces, std::vector<int32_t> specials, bool spm,
                int32_t eos_id = -1)
      : pieces_(std::move(pieces)), specials_(std::move(specials)), spm_(spm) {
    eos_id_ = eos_id;
    if (eos_id >= 0) eos_token_ = pieces_[eos_id];
  }

  // Greedy longest match; enough for tests that need some encoding.
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::string s(text);
    if (spm_) {
      std::string t = "\xE2\x96\x81";
      for (char c : s) t += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      s = t;
    }
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < s.size()) {
      int32_t best = -1;
      size_t best_len = 0;
      for (size_t id = 0; id < pieces_.size(); ++id) {
        const auto& p = pieces_[id];
        if (p.size() > best_len && s.compare(i, p.size(), p) == 0) {
          best = static_cast<int32_t>(id);
          best_len = p.size();
        }
      }
      if (best < 0) break;
      ids.push_back(best);
      i += best_len;
    }
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    std::string p = pieces_.at(id);
    if (!spm_ || is_special(id)) return p;
    std::string out;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 3;
      } else {
        out += p[i++];
      }
    }
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string out;
    bool first = true;
    for (int32_t id : ids) {
      if (skip_special && is_special(id)) continue;
      std::string b = token_bytes(id);
      if (spm_ && first && !b.empty() && b[0] == ' ') b.erase(0, 1);
      first = false;
      out += b;
    }
    return replace_invalid_utf8(out);
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const override {
    return std::find(specials_.begin(), specials_.end(), id) != specials_.end();
  }
  std::string id_to_piece(int32_t id) const override { return pieces_.at(id); }
  int32_t piece_to_id(std::string_view piece) const override {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i] == piece) return static_cast<int32_t>(i);
    }
    return -1;
  }

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> specials_;
  bool spm_;
};

}  // namespace qs::testing
