// tokenizer: SentencePiece BPE (Llama 2, Mistral, Gemma style) as a qs::tok::Tokenizer, built
// from a `tokenizer.model` ModelProto or from an HF tokenizer.json of the same kind (BPE with
// byte fallback and the "▁" metaspace). Encodes as sentencepiece + HF's LlamaTokenizer do:
// added/special tokens are cut out first, each text run gets the dummy prefix (legacy mode).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // From a parsed tokenizer.model and the checkpoint's tokenizer_config.json. Only the BPE
  // model type with an identity normalizer is supported; others give Unimplemented.
  static Result<std::unique_ptr<SentencePieceTokenizer>> from_model(const SpmModel& model,
                                                                    const TokenizerConfig& config,
                                                                    const std::string& source);

  // From an HF tokenizer.json for which is_spm_style_tokenizer_json() holds. Merges follow
  // the file's merge ranks (HF BPE) rather than piece scores.
  static Result<std::unique_ptr<SentencePieceTokenizer>> from_hf_json(
      const nlohmann::json& tokenizer_json, const TokenizerConfig& config,
      const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  bool is_special(int32_t id) const override;
  std::string id_to_piece(int32_t id) const override;
  int32_t piece_to_id(std::string_view piece) const override;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  // A piece of the vocabulary; added tokens beyond the model's pieces are kNormal-typed
  // entries with `added` set.
  struct Entry {
    std::string piece;
    float score = 0.0f;
    SpmPieceType type = SpmPieceType::kNormal;
    bool special = false;
    bool added = false;  // an added token: decoded as its content, never merged
  };

  SentencePieceTokenizer() = default;

  // Shared tail of both constructors: indexes, special tokens, BOS/EOS, the splitter.
  Status finish(const TokenizerConfig& config, const std::string& source, bool default_add_bos,
                bool default_add_eos);
  // SPM normalization of one text run (extra-whitespace removal, dummy prefix, "▁").
  std::string normalize(std::string_view text, bool dummy_prefix) const;
  // BPE over one normalized run, appending ids.
  void encode_normalized(std::string_view normalized, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void emit_unknown(std::string_view symbol, std::vector<int32_t>& out) const;

  std::vector<Entry> pieces_;
  PieceMap mergeable_;  // NORMAL / USER_DEFINED / UNUSED pieces: what BPE may produce
  PieceMap all_;        // every piece and added token, for piece_to_id
  // HF mode: (left id, right id) -> (rank, merged id). Empty in SPM-score mode.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_ranks_;
  bool use_merge_ranks_ = false;
  // User-defined pieces are matched whole before BPE, longest first; indexed by first byte
  // because Gemma-size vocabularies have thousands of them.
  std::array<std::vector<std::string>, 256> user_defined_;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> pieces, -1 where absent
  bool byte_fallback_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;

  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = false;
  bool escape_whitespaces_ = true;
  bool split_on_metaspace_ = false;      // HF Metaspace(split=true): BPE per "▁word"
  bool prefix_only_if_missing_ = false;  // HF Metaspace: no "▁" prepended before a space
  bool ignore_merges_ = false;           // HF BPE: a run that is a whole piece maps to it
  // HF LlamaTokenizer legacy=True: each text run between added tokens gets its own dummy
  // prefix; legacy=False: only a run at the very start of the text.
  bool prefix_every_run_ = true;
  bool add_bos_ = false;
  bool add_eos_ = false;

  AddedTokenSplitter splitter_;
};

// True when a parsed tokenizer.json is an SPM-style BPE (byte fallback or the "▁" metaspace
// normalizer/pre-tokenizer) rather than a byte-level BPE.
bool is_spm_style_tokenizer_json(const nlohmann::json& tokenizer_json);

}  // namespace qs::tok
