// tokenizer: the byte-level BPE model proper: a vocabulary of byte strings and a table of
// ranked merges, and the merge loop that turns one pre-token into ids. Everything here works
// on raw bytes; the GPT-2 byte<->character map (byte_level.h) is applied by the loaders.
// Promise: the ids of a pre-token always spell out exactly its bytes (when every byte has a
// token, which holds for all byte-level vocabularies).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace qs::tok {

class BpeModel {
 public:
  // Building goes in three steps: add_token for every token, then finish_tokens (which
  // indexes them), then the merges (add_merge or derive_merges_from_ranks).

  // Registers regular token `id`: `bytes` are the raw bytes it stands for, `piece` the text
  // the vocabulary file stores for it (byte-level form). Fails on a duplicate id.
  Status add_token(int32_t id, std::string bytes, std::string piece);

  // Indexes the tokens by bytes and by piece; where two ids share bytes (or a piece), the
  // lower id wins lookups, matching HF's first-wins maps.
  void finish_tokens();

  // Merge of (left, right) into `result`; lower `rank` merges first (HF: line order of
  // merges.txt; tiktoken: the rank of the merged token). A pair seen twice keeps its first
  // (lowest) rank, as HF does.
  void add_merge(int32_t left, int32_t right, int32_t result, int32_t rank);

  // Every way to cut each token into two tokens becomes a merge ranked by the whole token's
  // rank (= its id). This is exactly tiktoken's rule "merge the adjacent pair whose
  // concatenation has the lowest rank", written as a merge table.
  void derive_merges_from_ranks();

  // ignore_merges (HF) / tiktoken's first check: a pre-token that is itself a token maps
  // straight to it without running merges.
  void set_ignore_merges(bool v) { ignore_merges_ = v; }
  // Emitted for a byte that has no token (only matters for vocabularies that lack bytes).
  void set_unk_id(int32_t id) { unk_id_ = id; }

  // Appends the ids of one pre-token (raw bytes).
  void encode_piece(std::string_view bytes, std::vector<int32_t>* out) const;

  // One past the largest regular id.
  int32_t id_end() const { return static_cast<int32_t>(bytes_.size()); }
  bool has_id(int32_t id) const { return id >= 0 && id < id_end() && present_[id]; }
  const std::string& bytes_of(int32_t id) const { return bytes_[id]; }
  const std::string& piece_of(int32_t id) const { return pieces_[id]; }
  int32_t find_piece(std::string_view piece) const;
  int32_t find_bytes(std::string_view bytes) const;
  size_t n_tokens() const { return n_tokens_; }
  size_t n_merges() const { return n_merges_; }

 private:
  // Open-addressing index from strings to the ids whose string (in a table owned by the
  // model) equals them. The merge loop looks up every pre-token here, so it avoids the node
  // allocations and pointer chasing of std::unordered_map<std::string, ...>.
  class StringIndex {
   public:
    void build(const std::vector<std::string>& strings, const std::vector<uint8_t>& present);
    int32_t find(const std::vector<std::string>& strings, std::string_view s) const;

   private:
    struct Slot {
      uint32_t hash;
      int32_t id;  // -1: empty
    };
    std::vector<Slot> slots_;  // size a power of two, at most half full
  };
  struct MergeSlot {
    uint64_t key;  // pair_key(left, right); kEmptyKey when free
    int32_t rank;
    int32_t result;
  };
  static constexpr uint64_t kEmptyKey = ~uint64_t{0};
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void grow_merges();

  std::vector<std::string> bytes_;   // [id_end] raw bytes of each id ("" where unused)
  std::vector<std::string> pieces_;  // [id_end] stored text of each id
  std::vector<uint8_t> present_;     // [id_end] whether the id is a regular token
  size_t n_tokens_ = 0;
  bool indexed_ = false;
  StringIndex bytes_index_;
  StringIndex piece_index_;
  std::vector<MergeSlot> merges_;  // open addressing, size a power of two, at most half full
  size_t n_merges_ = 0;
  std::array<int32_t, 256> byte_to_id_{};  // -1 where the byte has no token
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
};

// A model from HF's byte-level form: `vocab` maps token text (byte-level characters) to id,
// `merges` lists (left, right) token texts in rank order. A merge whose parts or result are
// not in the vocabulary is an error, as in HF. `where` names the source in messages.
Result<BpeModel> build_byte_level_bpe(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const std::string& where);

}  // namespace qs::tok
