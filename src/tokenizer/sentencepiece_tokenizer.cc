// tokenizer: SentencePiece BPE encode/decode (see sentencepiece_tokenizer.h). The merge loop
// follows sentencepiece's bpe_model.cc: a heap of adjacent pairs, best score first, leftmost
// on ties; symbols whose piece is not in the vocabulary fall back to <0xXX> bytes or <unk>.
#include "tokenizer/sentencepiece_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <unordered_set>

#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD
// Added tokens may carry ids past the model's pieces; a gap larger than this is a broken
// file rather than a real vocabulary.
constexpr int64_t kMaxAddedIdGap = 1 << 20;

// Bytes in the character that starts with `lead`, as sentencepiece splits text: malformed
// bytes become one-byte symbols (and then byte-fallback tokens).
size_t spm_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC0 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  return 1;  // a stray continuation or invalid byte: a symbol of its own
}

// "<0x1F>" -> 0x1F, or -1.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return -1;  // sentencepiece writes upper-case hex only
    }
    value = value * 16 + d;
  }
  return value;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::from_model(
    const SpmModel& model, const TokenizerConfig& config, const std::string& source) {
  if (model.model_type != SpmModelType::kBpe) {
    return unimplemented(source + ": SentencePiece model_type " +
                         std::to_string(static_cast<int>(model.model_type)) +
                         " (only BPE = 2, as in Llama/Mistral/Gemma, is supported)");
  }
  if (!model.precompiled_charsmap.empty()) {
    return unimplemented(source + ": SentencePiece normalizer \"" + model.normalizer_name +
                         "\" with a precompiled charsmap (only identity normalization is "
                         "supported)");
  }
  if (model.treat_whitespace_as_suffix) {
    return unimplemented(source + ": treat_whitespace_as_suffix is not supported");
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->pieces_.reserve(model.pieces.size());
  for (const SpmPiece& p : model.pieces) {
    if (p.piece.empty()) {
      return data_loss(source + ": piece " + std::to_string(t->pieces_.size()) + " is empty");
    }
    Entry e;
    e.piece = p.piece;
    e.score = p.score;
    e.type = p.type;
    e.special = p.type == SpmPieceType::kControl || p.type == SpmPieceType::kUnknown;
    t->pieces_.push_back(std::move(e));
  }
  t->byte_fallback_ = model.byte_fallback;
  t->add_dummy_prefix_ = model.add_dummy_prefix;
  t->remove_extra_whitespaces_ = model.remove_extra_whitespaces;
  t->escape_whitespaces_ = model.escape_whitespaces;
  if (config.add_prefix_space.has_value()) t->add_dummy_prefix_ = *config.add_prefix_space;
  t->prefix_every_run_ = config.legacy.value_or(true);

  // LlamaTokenizer's defaults: the model's own <s>, </s>, <unk> are special added tokens.
  TokenizerConfig cfg = config;
  auto model_token = [&](int32_t id) -> std::optional<AddedToken> {
    if (id < 0 || id >= static_cast<int32_t>(model.pieces.size())) return std::nullopt;
    AddedToken tok;
    tok.id = id;
    tok.content = model.pieces[id].piece;
    tok.special = true;
    return tok;
  };
  if (!cfg.bos_token) cfg.bos_token = model_token(model.bos_id);
  if (!cfg.eos_token) cfg.eos_token = model_token(model.eos_id);
  if (!cfg.unk_token) cfg.unk_token = model_token(model.unk_id);

  QS_RETURN_IF_ERROR(t->finish(cfg, source, /*default_add_bos=*/true, /*default_add_eos=*/false));
  if (t->unk_id_ < 0) return data_loss(source + ": the model has no UNKNOWN (<unk>) piece");
  if (t->byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      if (t->byte_ids_[b] < 0) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        return data_loss(source + ": byte_fallback is on but the byte piece " + name +
                         " is missing");
      }
    }
  }
  return t;
}

Status SentencePieceTokenizer::finish(const TokenizerConfig& config, const std::string& source,
                                      bool default_add_bos, bool default_add_eos) {
  byte_ids_.fill(-1);
  for (int32_t id = 0; id < static_cast<int32_t>(pieces_.size()); ++id) {
    const Entry& e = pieces_[id];
    if (!all_.emplace(e.piece, id).second) {
      return data_loss(source + ": piece \"" + e.piece + "\" appears twice (ids " +
                       std::to_string(all_.find(e.piece)->second) + " and " + std::to_string(id) +
                       ")");
    }
    switch (e.type) {
      case SpmPieceType::kNormal:
      case SpmPieceType::kUnused:
        mergeable_.emplace(e.piece, id);
        break;
      case SpmPieceType::kUserDefined:
        mergeable_.emplace(e.piece, id);
        user_defined_[static_cast<unsigned char>(e.piece[0])].push_back(e.piece);
        break;
      case SpmPieceType::kByte: {
        const int b = parse_byte_piece(e.piece);
        if (b < 0) return data_loss(source + ": BYTE piece \"" + e.piece + "\" is not <0xXX>");
        byte_ids_[b] = id;
        break;
      }
      case SpmPieceType::kUnknown:
        if (unk_id_ < 0) unk_id_ = id;
        break;
      case SpmPieceType::kControl:
        break;
    }
  }
  for (std::vector<std::string>& list : user_defined_) {
    std::stable_sort(list.begin(), list.end(), [](const std::string& a, const std::string& b) {
      return a.size() > b.size();
    });
  }
  // Added tokens with ids: either re-declare a piece (Llama's <s>) or extend the vocabulary.
  std::vector<AddedToken> split_tokens;
  for (const AddedToken& tok : config.added_tokens) {
    if (tok.id < 0) continue;
    if (tok.id >= static_cast<int64_t>(pieces_.size()) + kMaxAddedIdGap) {
      return invalid_argument(source + ": added token \"" + tok.content + "\" has id " +
                              std::to_string(tok.id) + ", far past the vocabulary of " +
                              std::to_string(pieces_.size()));
    }
    if (tok.id >= static_cast<int32_t>(pieces_.size())) {
      pieces_.resize(tok.id + 1, Entry{"", 0.0f, SpmPieceType::kNormal, false, true});
    }
    Entry& e = pieces_[tok.id];
    if (e.piece != tok.content) {
      // The added token defines this id (HF's added_tokens_decoder wins over the model).
      if (!e.piece.empty() && all_.count(e.piece) && all_[e.piece] == tok.id) all_.erase(e.piece);
      mergeable_.erase(e.piece);
      e.piece = tok.content;
      e.type = SpmPieceType::kNormal;
      e.added = true;
    }
    e.special = e.special || tok.special;
    all_[tok.content] = tok.id;
    split_tokens.push_back(tok);
  }

  // Named special tokens: resolve by content, mark special, cut out of text.
  auto resolve = [&](const std::optional<AddedToken>& tok, const char* what) -> Result<int32_t> {
    if (!tok) return -1;
    auto it = all_.find(tok->content);
    if (it == all_.end()) {
      return invalid_argument(source + ": " + what + " \"" + tok->content +
                              "\" is not in the vocabulary");
    }
    AddedToken with_id = *tok;
    with_id.id = it->second;
    pieces_[with_id.id].special = true;
    split_tokens.push_back(with_id);
    return with_id.id;
  };
  QS_ASSIGN_OR_RETURN(bos_id_, resolve(config.bos_token, "bos_token"));
  QS_ASSIGN_OR_RETURN(eos_id_, resolve(config.eos_token, "eos_token"));
  QS_ASSIGN_OR_RETURN(int32_t unk_from_config, resolve(config.unk_token, "unk_token"));
  if (unk_from_config >= 0) unk_id_ = unk_from_config;
  // The pad token and additional special tokens only need marking special and cutting out.
  QS_RETURN_IF_ERROR(resolve(config.pad_token, "pad_token").status());
  for (const AddedToken& tok : config.additional_special_tokens) {
    QS_RETURN_IF_ERROR(resolve(tok, "additional_special_tokens entry").status());
  }
  if (bos_id_ >= 0) bos_token_ = pieces_[bos_id_].piece;
  if (eos_id_ >= 0) eos_token_ = pieces_[eos_id_].piece;
  add_bos_ = config.add_bos_token.value_or(default_add_bos) && bos_id_ >= 0;
  add_eos_ = config.add_eos_token.value_or(default_add_eos) && eos_id_ >= 0;

  // One splitter entry per content; the first declaration (added_tokens_decoder) keeps its
  // flags.
  std::vector<AddedToken> unique;
  std::unordered_set<std::string_view> seen;
  for (const AddedToken& tok : split_tokens) {
    if (seen.insert(tok.content).second) unique.push_back(tok);
  }
  splitter_ = AddedTokenSplitter(std::move(unique));
  return ok_status();
}

std::string SentencePieceTokenizer::normalize(std::string_view text, bool dummy_prefix) const {
  std::string s;
  if (remove_extra_whitespaces_) {
    // sentencepiece: drop leading and trailing spaces, fold runs of spaces into one.
    bool pending_space = false;
    for (char c : text) {
      if (c == ' ') {
        pending_space = !s.empty();
        continue;
      }
      if (pending_space) s.push_back(' ');
      pending_space = false;
      s.push_back(c);
    }
  } else {
    s.assign(text);
  }
  if (s.empty()) return s;  // no dummy prefix for empty text (sentencepiece, HF Prepend)
  if (dummy_prefix) s.insert(s.begin(), ' ');
  if (escape_whitespaces_) s = replace_all(s, " ", kMetaspace);
  return s;
}

void SentencePieceTokenizer::emit_unknown(std::string_view symbol,
                                          std::vector<int32_t>& out) const {
  if (byte_fallback_) {
    // HF's BPE falls back to <unk> for a byte without a piece; sentencepiece has them all.
    for (char c : symbol) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      out.push_back(id >= 0 ? id : unk_id_);
    }
    return;
  }
  if (fuse_unk_ && !out.empty() && out.back() == unk_id_) return;
  if (unk_id_ >= 0) out.push_back(unk_id_);
}

void SentencePieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto whole = mergeable_.find(word);
    if (whole != mergeable_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  struct Symbol {
    uint32_t start;
    uint32_t len;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
    int32_t id;   // -1: not a piece (yet)
    bool frozen;  // user-defined piece: never merged
  };
  struct Candidate {
    double priority;  // piece score, or minus the HF merge rank
    int32_t left;
    int32_t right;
    uint32_t size;
    int32_t merged_id;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
  };

  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = 0;
    bool frozen = false;
    for (const std::string& ud : user_defined_[static_cast<unsigned char>(word[pos])]) {
      if (word.compare(pos, ud.size(), ud) == 0) {
        len = ud.size();
        frozen = true;
        break;
      }
    }
    if (len == 0)
      len = std::min(spm_char_len(static_cast<unsigned char>(word[pos])), word.size() - pos);
    auto it = mergeable_.find(word.substr(pos, len));
    const int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), n - 1, n + 1,
                       it == mergeable_.end() ? -1 : it->second, frozen});
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> agenda(worse);
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || symbols[l].frozen || symbols[r].frozen) return;
    const uint32_t size = symbols[l].len + symbols[r].len;
    if (use_merge_ranks_) {
      if (symbols[l].id < 0 || symbols[r].id < 0) return;
      const uint64_t key =
          (static_cast<uint64_t>(symbols[l].id) << 32) | static_cast<uint32_t>(symbols[r].id);
      auto it = merge_ranks_.find(key);
      if (it == merge_ranks_.end()) return;
      agenda.push({-static_cast<double>(it->second.first), l, r, size, it->second.second});
    } else {
      auto it = mergeable_.find(word.substr(symbols[l].start, size));
      if (it == mergeable_.end()) return;
      agenda.push({pieces_[it->second].score, l, r, size, it->second});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) try_pair(i, i + 1);

  while (!agenda.empty()) {
    const Candidate top = agenda.top();
    agenda.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    // Stale: one side was merged away or grew since this pair was queued.
    if (l.len == 0 || r.len == 0 || l.next != top.right || l.len + r.len != top.size) continue;
    l.len += r.len;
    l.id = top.merged_id;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.len = 0;
    try_pair(l.prev, top.left);
    try_pair(top.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      emit_unknown(word.substr(s.start, s.len), out);
    }
  }
}

void SentencePieceTokenizer::encode_normalized(std::string_view normalized,
                                               std::vector<int32_t>& out) const {
  if (!split_on_metaspace_) {
    encode_word(normalized, out);
    return;
  }
  // HF Metaspace(split=true): every "▁" starts a new word.
  size_t start = 0;
  while (start < normalized.size()) {
    size_t next = normalized.find(kMetaspace, start + 1);
    if (next == std::string_view::npos) next = normalized.size();
    encode_word(normalized.substr(start, next - start), out);
    start = next;
  }
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text,
                                                    bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens && add_bos_) out.push_back(bos_id_);
  for (const TextSegment& seg : splitter_.split(text)) {
    if (seg.token_id >= 0) {
      out.push_back(seg.token_id);
      continue;
    }
    bool prefix = add_dummy_prefix_ && (prefix_every_run_ || seg.offset == 0);
    // HF Metaspace prepends "▁" only to text that does not already start with a space.
    if (prefix && prefix_only_if_missing_ && seg.text[0] == ' ') prefix = false;
    encode_normalized(normalize(seg.text, prefix), out);
  }
  if (add_special_tokens && add_eos_) out.push_back(eos_id_);
  return out;
}

std::string SentencePieceTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  const Entry& e = pieces_[id];
  if (e.added) return e.piece;
  switch (e.type) {
    case SpmPieceType::kByte:
      return std::string(1, static_cast<char>(parse_byte_piece(e.piece)));
    case SpmPieceType::kControl:
    case SpmPieceType::kUnknown:
      return e.piece;  // as HF writes them when special tokens are not skipped
    default:
      return escape_whitespaces_ ? replace_all(e.piece, kMetaspace, " ") : e.piece;
  }
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids,
                                           bool skip_special) const {
  std::string out;
  // The dummy prefix's space is dropped from the first piece of the text, and from the
  // first piece after BOS (sentencepiece strips at the start; llama2.c after BOS).
  bool at_start = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      out.append(kReplacementUtf8);
      at_start = false;
      continue;
    }
    const Entry& e = pieces_[id];
    if (e.special) {
      // A skipped special token is as if absent, except BOS, which starts a new text.
      if (!skip_special) {
        out.append(token_bytes(id));
        at_start = false;
      }
      if (id == bos_id_) at_start = true;
      continue;
    }
    std::string s = token_bytes(id);
    if (at_start && add_dummy_prefix_ && !e.added && e.type != SpmPieceType::kByte && !s.empty() &&
        s[0] == ' ') {
      s.erase(0, 1);
    }
    at_start = false;
    out.append(s);
  }
  return utf8_make_valid(out);
}

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && pieces_[id].special;
}

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return pieces_[id].piece;
}

int32_t SentencePieceTokenizer::piece_to_id(std::string_view piece) const {
  auto it = all_.find(piece);
  return it == all_.end() ? -1 : it->second;
}

}  // namespace qs::tok
