// tests: the Engine on tiny random-weight models (no tokenizer: token ids only). Batched
// greedy outputs equal one-at-a-time runs token for token, also through chunked prefill,
// preemption by recompute and prefix-cache hits; a repeated prefix is not computed twice;
// abort frees blocks at once; one request's error ends only that request; logprobs are the
// log-softmax of the raw logits, recomputed here independently.
#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "../common/engine_runner.h"
#include "engine/kv_cache.h"
#include "model_random_checkpoint.h"
#include "models/model.h"

namespace qs::engine {
namespace {

using qs::testing::Completion;
using qs::testing::greedy_request;
using qs::testing::make_engine;
using qs::testing::run_to_completion;

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = qs::testing::fresh_dir(qs::testing::unique_name("engine"));
    qs::testing::write_random_checkpoint(dir, qs::testing::tiny_config(GetParam()));
    auto m = models::Model::load(dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }

  std::vector<int32_t> random_prompt(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab() - 1));
    std::vector<int32_t> p(n);
    for (auto& t : p) t = id(rng);
    return p;
  }
  int64_t vocab() const { return model_->config().vocab_size; }

  // The request alone in a fresh engine without prefix caching.
  Completion solo(const EngineRequest& r) {
    EngineConfig c;
    c.enable_prefix_caching = false;
    auto e = make_engine(*model_, nullptr, {}, pool_, 256, c);
    EXPECT_TRUE(e->add_request(r).ok());
    return run_to_completion(*e)[r.id];
  }

  std::unique_ptr<models::Model> model_;
  ThreadPool pool_{1};
};

TEST_P(EngineTest, BatchedGreedyEqualsOneAtATime) {
  std::vector<EngineRequest> requests;
  const int lens[] = {1, 5, 17, 33, 60, 16, 47};
  for (int i = 0; i < 7; ++i) {
    requests.push_back(greedy_request("r" + std::to_string(i), random_prompt(lens[i], i), 24));
  }
  requests[2].params.temperature = 0.9f;  // seeded sampling is per request too
  requests[2].params.seed = 5;
  EngineConfig c;
  c.max_num_batched_tokens = 40;  // long prompts are chunked and share steps with decodes
  auto e = make_engine(*model_, nullptr, {}, pool_, 7 * 96, c);
  for (const auto& r : requests) ASSERT_TRUE(e->add_request(r).ok());
  auto batched = run_to_completion(*e);
  for (const auto& r : requests) {
    const Completion want = solo(r);
    EXPECT_EQ(batched[r.id].ids.size(), 24u) << r.id;
    EXPECT_EQ(batched[r.id].ids, want.ids) << r.id;
    EXPECT_EQ(batched[r.id].finish_reason, "length");
  }
  const EngineStats st = e->stats();
  EXPECT_EQ(st.generation_tokens, 7 * 24);
  EXPECT_EQ(st.prompt_tokens, 1 + 5 + 17 + 33 + 60 + 16 + 47);
  EXPECT_EQ(st.finished_length, 7);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
}

// The draws of one step run on the pool, a request per task (Engine::step): with two
// threads, seeded sampling at temperature > 0 (with penalties, min_tokens, top-k / top-p, and
// one request that wants logprobs, which draws serially) gives every request the tokens it
// gets alone.
TEST_P(EngineTest, SeededDrawsOnTwoThreadsEqualOneAtATime) {
  ThreadPool two(2);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 9; ++i) {
    EngineRequest r = greedy_request("s" + std::to_string(i), random_prompt(3 + 7 * i, 40 + i), 20);
    r.params.temperature = 0.5f + 0.1f * static_cast<float>(i);
    r.params.seed = 100 + i;
    if (i % 3 == 1) r.params.top_k = 8;
    if (i % 3 == 2) r.params.top_p = 0.8f;
    if (i == 4) r.params.min_tokens = 10;
    if (i == 5) r.params.repetition_penalty = 1.3f;
    if (i == 6) r.params.logprobs = 2;
    requests.push_back(r);
  }
  EngineConfig c;
  c.max_num_batched_tokens = 48;
  auto e = make_engine(*model_, nullptr, {}, two, 9 * 96, c);
  for (const auto& r : requests) ASSERT_TRUE(e->add_request(r).ok());
  auto batched = run_to_completion(*e);
  for (const auto& r : requests) {
    EXPECT_EQ(batched[r.id].ids.size(), 20u) << r.id;
    EXPECT_EQ(batched[r.id].ids, solo(r).ids) << r.id;
  }
}

TEST_P(EngineTest, PreemptionRecomputesTheSameGreedyTokens) {
  // 10 blocks of 16 tokens; four requests that each grow to 4 blocks cannot all stay.
  EngineConfig c;
  c.max_model_len = 64;
  auto e = make_engine(*model_, nullptr, {}, pool_, 160, c);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(greedy_request("p" + std::to_string(i), random_prompt(20, 40 + i), 40));
    ASSERT_TRUE(e->add_request(requests.back()).ok());
  }
  auto done = run_to_completion(*e);
  EXPECT_GT(e->stats().preemptions, 0);
  for (const auto& r : requests) {
    EXPECT_EQ(done[r.id].ids, solo(r).ids) << r.id;
    EXPECT_EQ(done[r.id].ids.size(), 40u);
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_P(EngineTest, ARepeatedPrefixIsServedFromTheCache) {
  auto e = make_engine(*model_, nullptr, {}, pool_, 256);
  const std::vector<int32_t> prefix = random_prompt(40, 7);
  ASSERT_TRUE(e->add_request(greedy_request("a", prefix, 8)).ok());
  auto first = run_to_completion(*e);
  EXPECT_EQ(first["a"].num_cached_tokens, 0);

  std::vector<int32_t> longer = prefix;
  for (int32_t t : random_prompt(5, 8)) longer.push_back(t);
  const EngineRequest b = greedy_request("b", longer, 8);
  const int64_t computed_before = e->stats().computed_tokens;
  ASSERT_TRUE(e->add_request(b).ok());
  auto second = run_to_completion(*e);
  EXPECT_EQ(second["b"].num_cached_tokens, 32);  // two full blocks of the shared 40
  EXPECT_EQ(second["b"].num_prompt_tokens, 45);
  // Only the uncached suffix went through the model, then 7 decode tokens.
  EXPECT_EQ(e->stats().computed_tokens - computed_before, (45 - 32) + 7);
  EXPECT_EQ(second["b"].ids, solo(b).ids);

  // The same prompt again: its last token is computed so that it has logits.
  ASSERT_TRUE(e->add_request(greedy_request("c", prefix, 8)).ok());
  auto third = run_to_completion(*e);
  EXPECT_EQ(third["c"].num_cached_tokens, 32);
  EXPECT_EQ(third["c"].ids, first["a"].ids);
  const EngineStats st = e->stats();
  EXPECT_EQ(st.prefix_cache_queries, 40 + 45 + 40);
  EXPECT_EQ(st.prefix_cache_hits, 64);
}

TEST_P(EngineTest, AbortFreesBlocksAtOnceAndTheOthersGoOn) {
  auto e = make_engine(*model_, nullptr, {}, pool_, 256);
  const EngineRequest a = greedy_request("a", random_prompt(30, 1), 50);
  const EngineRequest b = greedy_request("b", random_prompt(20, 2), 30);
  ASSERT_TRUE(e->add_request(a).ok());
  ASSERT_TRUE(e->add_request(b).ok());
  std::map<std::string, Completion> done;
  for (int i = 0; i < 3; ++i) {
    for (const auto& o : e->step()) qs::testing::accumulate(&done, o);
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 2 + 2);  // a: 33 tokens, b: 23 tokens in the cache
  e->abort("a");
  EXPECT_EQ(e->stats().kv_blocks_used, 2);
  EXPECT_EQ(e->stats().num_running, 1);
  EXPECT_FALSE(e->add_request(b).ok());  // b's id is still in use
  const auto next = e->step();
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next[0].id, "a");
  EXPECT_TRUE(next[0].finished);
  EXPECT_EQ(next[0].finish_reason, "abort");
  EXPECT_TRUE(next[0].error.ok());
  for (const auto& o : next) qs::testing::accumulate(&done, o);
  for (const auto& [id, c] : run_to_completion(*e)) {
    for (const auto& t : c.ids) done[id].ids.push_back(t);
    done[id].finish_reason = c.finish_reason;
  }
  EXPECT_EQ(done["a"].ids.size(), 3u);
  EXPECT_EQ(done["b"].ids, solo(b).ids);
  EXPECT_EQ(done["b"].finish_reason, "length");
  e->abort("a");  // unknown by now: ignored
  EXPECT_FALSE(e->has_unfinished());
  EXPECT_EQ(e->stats().finished_abort, 1);
}

TEST_P(EngineTest, OneRequestsErrorEndsOnlyThatRequest) {
  // max_model_len past the model's 256 positions: a request that reaches position 256 fails
  // in the forward; the one batched with it must not notice.
  EngineConfig c;
  c.max_model_len = 320;
  auto e = make_engine(*model_, nullptr, {}, pool_, 640, c);
  const EngineRequest lng = greedy_request("long", random_prompt(250, 3), 20);
  const EngineRequest shrt = greedy_request("short", random_prompt(10, 4), 30);
  ASSERT_TRUE(e->add_request(lng).ok());
  ASSERT_TRUE(e->add_request(shrt).ok());
  auto done = run_to_completion(*e);
  EXPECT_FALSE(done["long"].error.ok());
  EXPECT_NE(done["long"].error.message().find("max_position_embeddings"), std::string::npos)
      << done["long"].error.message();
  EXPECT_EQ(done["long"].finish_reason, "abort");
  // The prefill's token, then one per decode at positions 250..255; position 256 fails.
  EXPECT_EQ(done["long"].ids.size(), 7u);
  EXPECT_TRUE(done["short"].error.ok());
  EXPECT_EQ(done["short"].ids, solo(shrt).ids);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_P(EngineTest, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  auto e = make_engine(*model_, nullptr, {}, pool_, 256);
  EngineRequest r = greedy_request("lp", random_prompt(9, 6), 6);
  // Sampling settings must not change the reported logprobs (vLLM's raw_logprobs).
  r.params.temperature = 0.7f;
  r.params.seed = 3;
  r.params.repetition_penalty = 1.5f;
  r.params.logprobs = 5;
  EngineRequest zero = greedy_request("zero", random_prompt(4, 9), 3);
  zero.params.logprobs = 0;
  ASSERT_TRUE(e->add_request(r).ok());
  ASSERT_TRUE(e->add_request(zero).ok());
  auto done = run_to_completion(*e);
  const Completion& c = done["lp"];
  ASSERT_EQ(c.logprobs.size(), 6u);
  ASSERT_EQ(done["zero"].logprobs.size(), 3u);
  EXPECT_TRUE(done["zero"].logprobs[0].top.empty());

  // Independently: every position's logits in one prefill, then log-softmax in double.
  std::vector<int32_t> tokens = r.prompt_ids;
  tokens.insert(tokens.end(), c.ids.begin(), c.ids.end() - 1);
  const models::ModelConfig& mc = model_->config();
  KvCache cache({mc.n_layers, mc.n_kv_heads, mc.head_dim, 4, 16});
  ASSERT_TRUE(cache.reserve(0, static_cast<int64_t>(tokens.size())).ok());
  models::ForwardBatch batch;
  batch.token_ids = tokens;
  batch.seqs = {{0, static_cast<int64_t>(tokens.size()), 0, cache.block_table(0)}};
  batch.all_logits = true;
  std::vector<float> logits;
  ASSERT_TRUE(model_->forward(batch, cache.layers(), pool_, &logits).ok());
  for (size_t k = 0; k < c.ids.size(); ++k) {
    const float* row = logits.data() + (r.prompt_ids.size() - 1 + k) * vocab();
    double max_l = row[0], sum = 0.0;
    for (int64_t j = 0; j < vocab(); ++j) max_l = std::max<double>(max_l, row[j]);
    for (int64_t j = 0; j < vocab(); ++j) sum += std::exp(row[j] - max_l);
    auto logprob = [&](int32_t id) { return row[id] - max_l - std::log(sum); };
    std::vector<int32_t> order(vocab());
    for (int64_t j = 0; j < vocab(); ++j) order[j] = static_cast<int32_t>(j);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    const SampleLogprobs& got = c.logprobs[k];
    EXPECT_EQ(got.sampled.token, c.ids[k]);
    EXPECT_NEAR(got.sampled.logprob, logprob(c.ids[k]), 1e-4) << "token " << k;
    ASSERT_EQ(got.top.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(got.top[i].token, order[i]) << "token " << k << " rank " << i;
      EXPECT_NEAR(got.top[i].logprob, logprob(order[i]), 1e-4) << "token " << k;
    }
  }
}

TEST_P(EngineTest, TheCacheMustHoldOneFullLengthRequest) {
  EngineConfig c;  // max_model_len: the model's 256 positions
  c.kv_cache_bytes = kv_cache_bytes_per_token(model_->config()) * 255;
  auto e = Engine::create(*model_, nullptr, {}, pool_, c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(e.status().message().find("max_model_len 256"), std::string::npos)
      << e.status().message();
  c.max_model_len = 240;  // 15 blocks of 16 fit in 255 tokens' bytes
  auto ok = Engine::create(*model_, nullptr, {}, pool_, c);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->stats().kv_blocks_total, 15);
  EXPECT_EQ((*ok)->stats().kv_cache_tokens, 240);
}

TEST(MemoryBudget, FractionOfAvailableMemory) {
  auto avail = available_memory_bytes();
  ASSERT_TRUE(avail.ok()) << avail.status().to_string();
  EXPECT_GT(*avail, 0);
  auto half = kv_cache_bytes_from_memory_fraction(0.5);
  ASSERT_TRUE(half.ok());
  EXPECT_GT(*half, 0);
  EXPECT_LE(*half, *avail);  // MemAvailable moves between the two reads, never by 2x
  EXPECT_FALSE(kv_cache_bytes_from_memory_fraction(0.0).ok());
  EXPECT_FALSE(kv_cache_bytes_from_memory_fraction(1.5).ok());
}

INSTANTIATE_TEST_SUITE_P(Families, EngineTest,
                         ::testing::Values("LlamaForCausalLM", "Qwen3ForCausalLM",
                                           "Qwen2MoeForCausalLM", "MixtralForCausalLM"));

}  // namespace
}  // namespace qs::engine
