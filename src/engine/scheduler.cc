// engine: Scheduler (see scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>
#include <span>

#include "core/check.h"
#include "core/log.h"

namespace qs::engine {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), pool_(config.n_blocks, config.block_size, config.enable_prefix_caching) {
  QS_CHECK(config.block_size > 0 && config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 &&
           config.max_model_len > 0);
}

Status Scheduler::check_fits(int64_t n_prompt) const {
  if (n_prompt + 1 > config_.max_model_len) {
    return out_of_range("the prompt of " + std::to_string(n_prompt) +
                        " tokens leaves no room in the model's context of " +
                        std::to_string(config_.max_model_len));
  }
  if (blocks_for(n_prompt + 1) > pool_.n_blocks()) {
    return out_of_range("the prompt of " + std::to_string(n_prompt) + " tokens needs " +
                        std::to_string(blocks_for(n_prompt + 1)) + " KV-cache blocks of " +
                        std::to_string(config_.block_size) + " tokens; the whole cache has " +
                        std::to_string(pool_.n_blocks()));
  }
  return ok_status();
}

void Scheduler::add(Sequence* seq) {
  QS_CHECK(seq->state == Sequence::State::kNew && !seq->tokens.empty() && seq->n_computed == 0);
  seq->state = Sequence::State::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::update_hashes(Sequence* seq) {
  const int64_t bs = config_.block_size;
  const size_t n_full = seq->tokens.size() / bs;
  while (seq->block_hashes.size() < n_full) {
    const size_t i = seq->block_hashes.size();
    const uint64_t parent = i == 0 ? 0 : seq->block_hashes[i - 1];
    uint64_t h =
        hash_block_tokens(parent, std::span<const int32_t>(seq->tokens).subspan(i * bs, bs));
    const int64_t lo = static_cast<int64_t>(i) * bs, hi = lo + bs;
    for (const Sequence::ContentSpan& c : seq->content) {
      if (c.end <= lo || c.begin >= hi) continue;
      // The item's hash and where in it this block starts: equal keys mean equal pixels too.
      const int32_t salt[] = {static_cast<int32_t>(c.hash), static_cast<int32_t>(c.hash >> 32),
                              static_cast<int32_t>(lo - c.begin)};
      h = hash_block_tokens(h, salt);
    }
    seq->block_hashes.push_back(h);
  }
}

bool Scheduler::grow(Sequence* seq, int64_t n_tokens) {
  const int64_t need = blocks_for(n_tokens) - static_cast<int64_t>(seq->block_table.size());
  if (need <= 0) return true;
  if (need > pool_.n_free()) return false;
  QS_CHECK(pool_.allocate(need, &seq->block_table).ok());
  return true;
}

void Scheduler::free_blocks(Sequence* seq) {
  // Reversed, so that the sequence's last blocks are the first evicted (vLLM does the same):
  // a later request sharing the prefix needs the first ones.
  std::vector<int32_t> reversed(seq->block_table.rbegin(), seq->block_table.rend());
  pool_.release(reversed);
  seq->block_table.clear();
  seq->n_registered = 0;
}

void Scheduler::preempt(Sequence* seq) {
  free_blocks(seq);
  seq->n_computed = 0;
  seq->state = Sequence::State::kWaiting;
  waiting_.push_front(seq);
  ++n_preemptions_;
  QS_LOG_WARN(
      "request %s preempted (KV cache full; %zu tokens will be recomputed); consider a larger "
      "KV cache or a smaller max_num_seqs / max_num_batched_tokens",
      seq->id.c_str(), seq->tokens.size());
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running sequences, oldest first: a decode token or the next prefill chunk each.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t n_new =
        std::min(static_cast<int64_t>(seq->tokens.size()) - seq->n_computed, budget);
    QS_CHECK(n_new > 0);
    bool scheduled = true;
    while (!grow(seq, seq->n_computed + n_new)) {
      // Out of blocks: the newest running sequence gives its blocks back. Sequences before
      // i are already scheduled and are never the newest, since i is not past the back.
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == seq) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    out.chunks.push_back({seq, seq->n_computed, n_new});
    budget -= n_new;
    ++i;
  }

  // Then waiting ones, first come first served; not while this step had to preempt.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         n_running() < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const int64_t n_tokens = static_cast<int64_t>(seq->tokens.size());
    std::vector<int32_t> hits;
    if (config_.enable_prefix_caching) {
      update_hashes(seq);
      // At least the last token is computed, so that its logits exist.
      const size_t max_hit_blocks = static_cast<size_t>((n_tokens - 1) / config_.block_size);
      const size_t n_lookup = std::min(seq->block_hashes.size(), max_hit_blocks);
      hits = pool_.find_cached(std::span<const uint64_t>(seq->block_hashes).first(n_lookup),
                               seq->tokens);
    }
    const int64_t n_cached = static_cast<int64_t>(hits.size()) * config_.block_size;
    const int64_t n_new = std::min(n_tokens - n_cached, budget);
    // Hits that sit in the free queue stop being free once acquired.
    const int64_t revived =
        std::count_if(hits.begin(), hits.end(), [&](int32_t b) { return pool_.ref_count(b) == 0; });
    const int64_t need = blocks_for(n_cached + n_new) - static_cast<int64_t>(hits.size());
    if (need > pool_.n_free() - revived) break;  // stays at the head; FCFS admits no one past
    waiting_.pop_front();
    pool_.acquire(hits);
    seq->block_table = hits;
    seq->n_registered = hits.size();
    seq->n_computed = n_cached;
    QS_CHECK(grow(seq, n_cached + n_new));
    if (seq->n_cached_tokens < 0) seq->n_cached_tokens = n_cached;
    prefix_queries_ += n_tokens;
    prefix_hits_ += n_cached;
    seq->state = Sequence::State::kRunning;
    running_.push_back(seq);
    out.chunks.push_back({seq, n_cached, n_new});
    budget -= n_new;
  }
  out.n_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::commit(const ScheduledChunk& chunk) {
  Sequence* seq = chunk.seq;
  QS_CHECK(seq->state == Sequence::State::kRunning && seq->n_computed == chunk.start_pos);
  seq->n_computed += chunk.n_tokens;
  if (!config_.enable_prefix_caching) return;
  update_hashes(seq);
  const size_t n_full = static_cast<size_t>(seq->n_computed / config_.block_size);
  const std::span<const int32_t> tokens(seq->tokens);
  for (size_t i = seq->n_registered; i < n_full; ++i) {
    pool_.register_block(seq->block_table[i], seq->block_hashes[i],
                         i == 0 ? 0 : seq->block_hashes[i - 1],
                         tokens.subspan(i * config_.block_size, config_.block_size));
  }
  seq->n_registered = std::max(seq->n_registered, n_full);
}

void Scheduler::finish(Sequence* seq) {
  if (seq->state == Sequence::State::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else if (seq->state == Sequence::State::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  } else {
    return;
  }
  free_blocks(seq);
  seq->state = Sequence::State::kFinished;
}

}  // namespace qs::engine
