// tests: the continuous-batching scheduler without a model: the token budget, max_num_seqs,
// chunked prefill, preemption of the newest running sequence when blocks run out, rejection
// of prompts that can never fit, finish() freeing blocks at once, and prefix-cache hits at
// admission (shared blocks, the last prompt token always computed).
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "engine/scheduler.h"

namespace qs::engine {
namespace {

std::unique_ptr<Sequence> make_seq(const std::string& id, int n_prompt, int32_t first_token) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  for (int i = 0; i < n_prompt; ++i) s->tokens.push_back(first_token + i);
  s->n_prompt = n_prompt;
  return s;
}

SchedulerConfig config(int64_t n_blocks, int64_t budget, int64_t max_seqs = 8) {
  SchedulerConfig c;
  c.n_blocks = n_blocks;
  c.block_size = 4;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = budget;
  c.max_model_len = 16;
  c.enable_prefix_caching = true;
  return c;
}

// Commits every chunk and, as the engine does, appends a token to each sequence whose
// tokens are now all computed.
void run_step(Scheduler& s, const SchedulerOutput& out, int32_t token = 7) {
  for (const auto& ch : out.chunks) {
    s.commit(ch);
    if (ch.seq->n_computed == static_cast<int64_t>(ch.seq->tokens.size())) {
      ch.seq->tokens.push_back(token);
    }
  }
}

TEST(Scheduler, BudgetChunksPrefillsAndRunningGoesFirst) {
  Scheduler s(config(100, 10));
  auto a = make_seq("a", 7, 100), b = make_seq("b", 7, 200);
  s.add(a.get());
  s.add(b.get());
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a.get());
  EXPECT_EQ(out.chunks[0].n_tokens, 7);
  EXPECT_EQ(out.chunks[1].seq, b.get());
  EXPECT_EQ(out.chunks[1].start_pos, 0);
  EXPECT_EQ(out.chunks[1].n_tokens, 3);  // the budget's rest: b's prefill is chunked
  EXPECT_EQ(out.n_tokens, 10);
  EXPECT_EQ(b->block_table.size(), 1u);  // blocks only for what is computed
  run_step(s, out);
  EXPECT_EQ(a->tokens.size(), 8u);  // a sampled; b's chunk did not reach its end
  EXPECT_EQ(b->tokens.size(), 7u);

  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a.get());  // decode: one token
  EXPECT_EQ(out.chunks[0].start_pos, 7);
  EXPECT_EQ(out.chunks[0].n_tokens, 1);
  EXPECT_EQ(out.chunks[1].seq, b.get());  // the rest of the prompt
  EXPECT_EQ(out.chunks[1].start_pos, 3);
  EXPECT_EQ(out.chunks[1].n_tokens, 4);
  EXPECT_EQ(out.n_tokens, 5);
}

TEST(Scheduler, AdmitsNoMoreThanMaxNumSeqs) {
  Scheduler s(config(100, 100, 2));
  auto a = make_seq("a", 3, 100), b = make_seq("b", 3, 200), c = make_seq("c", 3, 300);
  for (auto* q : {a.get(), b.get(), c.get()}) s.add(q);
  SchedulerOutput out = s.schedule();
  EXPECT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(s.n_running(), 2);
  EXPECT_EQ(s.n_waiting(), 1);
  run_step(s, out);
  s.finish(a.get());  // a slot opens: c comes in next step
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].seq, c.get());
  EXPECT_EQ(s.n_waiting(), 0);
}

TEST(Scheduler, OutOfBlocksPreemptsTheNewestAndRecomputesItLater) {
  Scheduler s(config(4, 100));  // 4 blocks of 4 tokens
  auto a = make_seq("a", 6, 100), b = make_seq("b", 6, 200);
  s.add(a.get());
  s.add(b.get());
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(s.pool().n_free(), 0);
  run_step(s, out);  // 7 tokens each
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  run_step(s, out);  // 8 tokens each
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);  // position 7 still fits in the second block
  run_step(s, out);                  // 9 tokens each: position 8 needs a third block
  out = s.schedule();
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], b.get());
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq, a.get());
  EXPECT_EQ(a->block_table.size(), 3u);
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_TRUE(b->block_table.empty());
  EXPECT_EQ(b->state, Sequence::State::kWaiting);
  EXPECT_EQ(s.n_preemptions(), 1);
  EXPECT_EQ(b->tokens.size(), 9u);  // its sampled tokens are kept and recomputed later
  run_step(s, out);

  s.finish(a.get());
  EXPECT_EQ(s.pool().n_used(), 0);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq, b.get());
  // b's first block went back to the free queue still cached, so it is found again; its
  // second block was evicted for a's third. At least the last token is always computed.
  EXPECT_EQ(out.chunks[0].start_pos, 4);
  EXPECT_EQ(out.chunks[0].n_tokens, 5);
}

TEST(Scheduler, RejectsPromptsThatCanNeverFit) {
  Scheduler s(config(100, 100));
  EXPECT_TRUE(s.check_fits(15).ok());
  Status too_long = s.check_fits(16);
  EXPECT_EQ(too_long.code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.message().find("leaves no room in the model's context of 16"),
            std::string::npos)
      << too_long.message();
  SchedulerConfig small = config(2, 100);
  small.max_model_len = 64;
  Scheduler tiny(small);
  EXPECT_TRUE(tiny.check_fits(7).ok());
  Status too_big = tiny.check_fits(8);  // 9 tokens need 3 blocks of 4; the cache has 2
  EXPECT_EQ(too_big.code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_big.message().find("the whole cache has 2"), std::string::npos)
      << too_big.message();
}

TEST(Scheduler, FinishFreesBlocksAtOnceFromAnyState) {
  SchedulerConfig c = config(8, 100, 1);
  c.enable_prefix_caching = false;
  Scheduler s(c);
  auto a = make_seq("a", 9, 100), b = make_seq("b", 3, 200);
  s.add(a.get());
  s.add(b.get());
  SchedulerOutput out = s.schedule();
  EXPECT_EQ(s.pool().n_used(), 3);
  s.finish(b.get());  // waiting: just leaves the queue
  EXPECT_EQ(s.n_waiting(), 0);
  s.finish(a.get());  // running: its blocks are free before any further step
  EXPECT_EQ(s.pool().n_used(), 0);
  EXPECT_EQ(s.n_running(), 0);
  EXPECT_EQ(a->state, Sequence::State::kFinished);
  EXPECT_TRUE(s.schedule().chunks.empty());
}

TEST(Scheduler, APromptPrefixIsSharedNotRecomputed) {
  Scheduler s(config(100, 100));
  auto a = make_seq("a", 10, 100);
  s.add(a.get());
  run_step(s, s.schedule());        // 2 full blocks of a registered
  auto b = make_seq("b", 10, 100);  // the same prompt
  auto c = make_seq("c", 8, 100);   // exactly a's first two blocks
  auto d = make_seq("d", 10, 100);
  d->tokens[1] = 5;  // differs in the first block: no hit at all
  for (auto* q : {b.get(), c.get(), d.get()}) s.add(q);
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 4u);
  EXPECT_EQ(out.chunks[1].seq, b.get());
  EXPECT_EQ(out.chunks[1].start_pos, 8);
  EXPECT_EQ(out.chunks[1].n_tokens, 2);
  EXPECT_EQ(b->n_cached_tokens, 8);
  EXPECT_EQ(b->block_table[0], a->block_table[0]);
  EXPECT_EQ(b->block_table[1], a->block_table[1]);
  EXPECT_NE(b->block_table[2], a->block_table[2]);
  EXPECT_EQ(s.pool().ref_count(a->block_table[0]), 3);  // a, b, c
  EXPECT_EQ(s.pool().ref_count(a->block_table[1]), 2);  // c recomputes its last block
  EXPECT_EQ(out.chunks[2].start_pos, 4);
  EXPECT_EQ(out.chunks[2].n_tokens, 4);
  EXPECT_EQ(out.chunks[3].start_pos, 0);
  EXPECT_EQ(s.prefix_queries(), 10 + 10 + 8 + 10);
  EXPECT_EQ(s.prefix_hits(), 8 + 4);
  // Shared blocks stay while anyone holds them.
  s.finish(a.get());
  EXPECT_EQ(s.pool().ref_count(b->block_table[0]), 2);
}

}  // namespace
}  // namespace qs::engine
