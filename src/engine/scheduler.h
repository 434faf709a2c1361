// engine: the continuous-batching scheduler, as vLLM V1's (docs/configuration/optimization.md):
// each step has a budget of max_num_batched_tokens; running sequences go first (a decode
// token, or the next chunk of a prefill), then waiting ones are admitted first come, first
// served while the budget, max_num_seqs and the free KV blocks allow, their prompts chunked
// to the budget left. Blocks are allocated as sequences grow; when a running sequence needs a
// block and none is free, the most recently admitted running sequence is preempted: its blocks
// are freed and it goes back to the front of the waiting queue, to be recomputed (cheaply,
// through the prefix cache) when there is room. It knows tokens and blocks, never the model.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/block_pool.h"

namespace qs::engine {

struct SchedulerConfig {
  int64_t n_blocks = 0;
  int64_t block_size = 16;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // > 0
  bool enable_prefix_caching = true;
};

// One request's tokens and cache state. The engine owns it; the scheduler holds pointers from
// add() until finish().
struct Sequence {
  enum class State { kNew, kWaiting, kRunning, kFinished };

  std::string id;
  std::vector<int32_t> tokens;  // the prompt, then every sampled token
  int64_t n_prompt = 0;
  int64_t n_computed = 0;              // leading tokens whose K/V are in the cache
  int64_t n_cached_tokens = -1;        // prefix-cache hit at first admission (-1: not yet admitted)
  std::vector<int32_t> block_table;    // covers at least n_computed tokens
  std::vector<uint64_t> block_hashes;  // hash chain of the full blocks of `tokens` so far
  size_t n_registered = 0;             // leading table blocks already offered to the cache
  State state = State::kNew;
  // Token ranges whose content is not their ids (an image's placeholders) and the hash of
  // what they stand for, mixed into the key of every block they touch.
  struct ContentSpan {
    int64_t begin = 0, end = 0;
    uint64_t hash = 0;
  };
  std::vector<ContentSpan> content;
};

// `n_tokens` tokens of `seq`, from position `start_pos` (== seq->n_computed), go into this
// step's forward.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start_pos = 0;
  int64_t n_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // running sequences first, then new admissions
  std::vector<Sequence*> preempted;    // sent back to waiting during this step
  int64_t n_tokens = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  const SchedulerConfig& config() const { return config_; }
  const BlockPool& pool() const { return pool_; }

  // Whether a prompt of n_prompt tokens could ever run: it needs room for one more token in
  // max_model_len and the blocks for n_prompt + 1 tokens in the whole cache.
  Status check_fits(int64_t n_prompt) const;
  // Queues a sequence (state kNew, n_computed 0, non-empty tokens) at the tail of waiting.
  void add(Sequence* seq);
  // Picks this step's chunks and allocates their blocks (see the file comment).
  SchedulerOutput schedule();
  // Records that the chunk's tokens are now in the cache and offers every newly full block
  // to the prefix cache.
  void commit(const ScheduledChunk& chunk);
  // Removes the sequence from the queues and releases its blocks at once (done, aborted,
  // failed). Unknown or finished sequences are ignored.
  void finish(Sequence* seq);

  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t n_preemptions() const { return n_preemptions_; }
  // Tokens looked up in the prefix cache at admission, and of those, found.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

 private:
  void update_hashes(Sequence* seq);
  void free_blocks(Sequence* seq);
  void preempt(Sequence* seq);
  // Grows seq's table to cover n_tokens; false (table unchanged) when blocks are short.
  bool grow(Sequence* seq, int64_t n_tokens);
  int64_t blocks_for(int64_t n_tokens) const {
    return (n_tokens + config_.block_size - 1) / config_.block_size;
  }

  SchedulerConfig config_;
  BlockPool pool_;
  std::vector<Sequence*> running_;  // in admission order: the back is preempted first
  std::deque<Sequence*> waiting_;
  int64_t n_preemptions_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace qs::engine
