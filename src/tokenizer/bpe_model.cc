// tokenizer: byte-level BPE vocabulary, merge table and merge loop (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <optional>
#include <queue>

#include "core/check.h"
#include "core/limits.h"
#include "tokenizer/byte_level.h"

namespace qs::tok {

namespace {

// FNV-1a; token strings are short, so a simple byte loop is fast enough.
uint32_t hash_bytes(std::string_view s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

// splitmix64's finaliser: spreads the two ids of a pair key over all bits.
uint64_t hash_pair(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void BpeModel::StringIndex::build(const std::vector<std::string>& strings,
                                  const std::vector<uint8_t>& present) {
  size_t capacity = 16;
  while (capacity < strings.size() * 2) capacity *= 2;
  slots_.assign(capacity, Slot{0, -1});
  const size_t mask = capacity - 1;
  for (size_t id = 0; id < strings.size(); ++id) {
    if (!present[id]) continue;
    const uint32_t h = hash_bytes(strings[id]);
    size_t i = h & mask;
    bool duplicate = false;
    for (; slots_[i].id >= 0; i = (i + 1) & mask) {
      if (slots_[i].hash == h && strings[slots_[i].id] == strings[id]) {
        duplicate = true;  // an earlier (lower) id already has these bytes
        break;
      }
    }
    if (!duplicate) slots_[i] = Slot{h, static_cast<int32_t>(id)};
  }
}

int32_t BpeModel::StringIndex::find(const std::vector<std::string>& strings,
                                    std::string_view s) const {
  if (slots_.empty()) return -1;
  const uint32_t h = hash_bytes(s);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask; slots_[i].id >= 0; i = (i + 1) & mask) {
    if (slots_[i].hash == h && strings[slots_[i].id] == s) return slots_[i].id;
  }
  return -1;
}

Status BpeModel::add_token(int32_t id, std::string bytes, std::string piece) {
  QS_CHECK_MSG(!indexed_, "add_token after finish_tokens");
  if (id < 0) return data_loss("negative token id " + std::to_string(id));
  // Ids index dense tables: one past the limit would allocate gigabytes for a single entry.
  if (id >= limits::kMaxVocab) {
    return data_loss("token id " + std::to_string(id) + " is above the vocabulary limit of " +
                     std::to_string(limits::kMaxVocab));
  }
  if (id >= id_end()) {
    bytes_.resize(id + 1);
    pieces_.resize(id + 1);
    present_.resize(id + 1, 0);
  }
  if (present_[id]) {
    return data_loss("token id " + std::to_string(id) + " is given twice (\"" + pieces_[id] +
                     "\" and \"" + piece + "\")");
  }
  present_[id] = 1;
  bytes_[id] = std::move(bytes);
  pieces_[id] = std::move(piece);
  ++n_tokens_;
  return ok_status();
}

void BpeModel::finish_tokens() {
  QS_CHECK_MSG(!indexed_, "finish_tokens called twice");
  bytes_index_.build(bytes_, present_);
  piece_index_.build(pieces_, present_);
  indexed_ = true;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_to_id_[b] = find_bytes(std::string_view(&c, 1));
  }
}

void BpeModel::grow_merges() {
  std::vector<MergeSlot> old = std::move(merges_);
  merges_.assign(old.empty() ? 1024 : old.size() * 2, MergeSlot{kEmptyKey, 0, 0});
  const size_t mask = merges_.size() - 1;
  for (const MergeSlot& m : old) {
    if (m.key == kEmptyKey) continue;
    size_t i = hash_pair(m.key) & mask;
    while (merges_[i].key != kEmptyKey) i = (i + 1) & mask;
    merges_[i] = m;
  }
}

void BpeModel::add_merge(int32_t left, int32_t right, int32_t result, int32_t rank) {
  if ((n_merges_ + 1) * 2 > merges_.size()) grow_merges();
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  size_t i = hash_pair(key) & mask;
  for (; merges_[i].key != kEmptyKey; i = (i + 1) & mask) {
    if (merges_[i].key == key) return;  // first (lowest-ranked) entry stays
  }
  merges_[i] = MergeSlot{key, rank, result};
  ++n_merges_;
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (merges_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t i = hash_pair(key) & mask; merges_[i].key != kEmptyKey; i = (i + 1) & mask) {
    if (merges_[i].key == key) return &merges_[i];
  }
  return nullptr;
}

void BpeModel::derive_merges_from_ranks() {
  QS_CHECK_MSG(indexed_, "derive_merges_from_ranks before finish_tokens");
  for (int32_t id = 0; id < id_end(); ++id) {
    if (!present_[id]) continue;
    const std::string_view whole = bytes_[id];
    for (size_t cut = 1; cut < whole.size(); ++cut) {
      const int32_t left = find_bytes(whole.substr(0, cut));
      if (left < 0) continue;
      const int32_t right = find_bytes(whole.substr(cut));
      if (right < 0) continue;
      add_merge(left, right, id, id);
    }
  }
}

int32_t BpeModel::find_piece(std::string_view piece) const {
  QS_CHECK(indexed_);
  return piece_index_.find(pieces_, piece);
}

int32_t BpeModel::find_bytes(std::string_view bytes) const {
  QS_CHECK(indexed_);
  return bytes_index_.find(bytes_, bytes);
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>* out) const {
  if (bytes.empty()) return;
  if (ignore_merges_ || bytes.size() == 1) {
    const int32_t whole = find_bytes(bytes);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  // Symbols form a doubly linked list over the piece; a merge joins a symbol with its right
  // neighbour. Candidate merges wait in a min-heap ordered by (rank, position), so equal
  // ranks merge leftmost first, as HF's word.merge_all and tiktoken do. Stale entries (a
  // side already merged away) are recognised on pop by re-checking the pair.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  std::vector<Symbol> sym;
  sym.reserve(bytes.size());
  for (char c : bytes) {
    const int32_t id = byte_to_id_[static_cast<uint8_t>(c)];
    if (id < 0) {
      // HF BPE without byte tokens: the unknown token if there is one, else nothing.
      if (unk_id_ >= 0) sym.push_back({unk_id_, 0, 0});
      continue;
    }
    sym.push_back({id, 0, 0});
  }
  const auto n = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const int32_t left = sym[pos].id, right = sym[sym[pos].next].id;
    if (const MergeSlot* m = find_merge(left, right))
      heap.push({m->rank, pos, left, right, m->result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left || s.next < 0 || sym[s.next].id != c.right) continue;  // stale
    const int32_t gone = s.next;
    s.id = c.result;
    s.next = sym[gone].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    sym[gone].id = -1;  // unlinked; never matches a candidate again
    push_pair(s.prev);
    push_pair(c.pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

Result<BpeModel> build_byte_level_bpe(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const std::string& where) {
  BpeModel model;
  for (const auto& [piece, id] : vocab) {
    // A vocabulary entry outside the byte map (an added token listed in the vocab) stands for
    // its own UTF-8 bytes, which is also what HF's ByteLevel decoder falls back to.
    std::optional<std::string> bytes = byte_level_decode(piece);
    Status st = model.add_token(id, bytes ? std::move(*bytes) : piece, piece);
    if (!st.ok()) return st.with_context(where);
  }
  if (model.n_tokens() == 0) return data_loss(where + ": the vocabulary is empty");
  model.finish_tokens();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const int32_t left = model.find_piece(a);
    const int32_t right = model.find_piece(b);
    const int32_t result = model.find_piece(a + b);
    if (left < 0 || right < 0 || result < 0) {
      const std::string& missing = left < 0 ? a : right < 0 ? b : a + b;
      return data_loss(where + ": merge " + std::to_string(rank + 1) + " (\"" + a + " " + b +
                       "\") uses \"" + missing + "\", which is not in the vocabulary");
    }
    model.add_merge(left, right, result, static_cast<int32_t>(rank));
  }
  return model;
}

}  // namespace qs::tok
