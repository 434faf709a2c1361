// tests: the data-parallel routing policy (longest cached prefix, then least loaded, then
// lowest index; unhealthy replicas skipped; the remembered blocks bounded; round-robin) and
// the front end's /metrics merge.
#include <gtest/gtest.h>

#include <numeric>

#include "server/dp_metrics.h"
#include "server/dp_router.h"

namespace qs::server {
namespace {

// `n_blocks` full blocks of token ids starting at `first` (distinct firsts: distinct prompts).
std::vector<int32_t> tokens(int32_t first, int n_blocks, int extra = 0) {
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks * kDpBlockSize + extra));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

std::vector<uint64_t> hashes(int32_t first, int n_blocks) {
  return prompt_block_hashes(tokens(first, n_blocks));
}

DpRouter router(int n, DpRouting routing = DpRouting::kPrefix) {
  DpRouterOptions o;
  o.n_replicas = n;
  o.routing = routing;
  return DpRouter(o);
}

TEST(DpBlockHashesTest, OneHashPerFullBlockChained) {
  EXPECT_EQ(prompt_block_hashes(tokens(0, 3, 5)).size(), 3u);
  EXPECT_TRUE(prompt_block_hashes(tokens(0, 0, 15)).empty());
  // Same prefix: same hashes up to where the prompts differ, different from there on.
  std::vector<int32_t> a = tokens(0, 4), b = a;
  b[2 * kDpBlockSize + 3] = 99999;
  const auto ha = prompt_block_hashes(a), hb = prompt_block_hashes(b);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_NE(ha[3], hb[3]);  // chained: a change in block 2 changes every block after it
  // A block equal to another prompt's block at another position hashes differently.
  std::vector<int32_t> c(a.begin() + kDpBlockSize, a.end());
  EXPECT_NE(prompt_block_hashes(c)[0], ha[1]);
}

TEST(DpBlockHashesTest, MultimodalItemsAreKeyedByContent) {
  const std::vector<int32_t> ids = tokens(0, 3);
  models::MultimodalItem cat, dog, uncached;
  cat.offset = dog.offset = uncached.offset = kDpBlockSize + 2;
  cat.hash = 1;
  dog.hash = 2;
  const auto hc = prompt_block_hashes(ids, {cat}), hd = prompt_block_hashes(ids, {dog});
  EXPECT_EQ(hc[0], hd[0]);  // before the image
  EXPECT_NE(hc[1], hd[1]);
  EXPECT_NE(hc[2], hd[2]);
  // No content hash: nothing from the item's block on can be matched.
  EXPECT_EQ(prompt_block_hashes(ids, {uncached}).size(), 1u);
}

TEST(DpRouterTest, MissesGoToTheLeastLoadedThenLowestIndex) {
  DpRouter r = router(3);
  EXPECT_EQ(r.route(hashes(0, 2)).replica, 0);
  EXPECT_EQ(r.route(hashes(1000, 2)).replica, 1);
  EXPECT_EQ(r.route(hashes(2000, 2)).replica, 2);
  r.finish(1);
  const DpChoice c = r.route(hashes(3000, 2));
  EXPECT_EQ(c.replica, 1);
  EXPECT_FALSE(c.prefix_routed);
  EXPECT_EQ(c.matched_blocks, 0);
}

TEST(DpRouterTest, LongestPrefixWins) {
  DpRouter r = router(3);
  // Replica 0 saw 2 blocks of the shared prefix, replica 1 all 6.
  std::vector<int32_t> doc = tokens(0, 6);
  std::vector<int32_t> two(doc.begin(), doc.begin() + 2 * kDpBlockSize);
  ASSERT_EQ(r.route(prompt_block_hashes(two)).replica, 0);
  ASSERT_EQ(r.route(hashes(5000, 1)).replica, 1);
  r.finish(1);
  r.remember(1, prompt_block_hashes(doc));
  // Replica 1 wins although replica 2 is idle and replica 0 matches too.
  std::vector<int32_t> next = doc;
  next.insert(next.end(), 20, 7);
  const DpChoice c = r.route(prompt_block_hashes(next));
  EXPECT_EQ(c.replica, 1);
  EXPECT_TRUE(c.prefix_routed);
  EXPECT_EQ(c.matched_blocks, 6);
  EXPECT_EQ(r.stats()[1].prefix_routed, 1);
}

TEST(DpRouterTest, TiesGoToTheLeastLoaded) {
  DpRouter r = router(2);
  const auto shared = hashes(0, 4);
  r.remember(0, shared);
  r.remember(1, shared);
  ASSERT_EQ(r.route(hashes(9000, 1)).replica, 0);  // replica 0 now has one in flight
  const DpChoice c = r.route(shared);
  EXPECT_EQ(c.replica, 1);
  EXPECT_TRUE(c.prefix_routed);
  EXPECT_EQ(c.matched_blocks, 4);
}

TEST(DpRouterTest, BelowTheMinimumIsAMiss) {
  DpRouterOptions o;
  o.n_replicas = 2;
  o.min_prefix_blocks = 3;
  DpRouter r(o);
  r.remember(1, hashes(0, 2));
  const DpChoice c = r.route(hashes(0, 5));
  EXPECT_EQ(c.replica, 0);
  EXPECT_FALSE(c.prefix_routed);
}

TEST(DpRouterTest, AHotPrefixDoesNotPileUpPastTheImbalanceBound) {
  DpRouterOptions o;
  o.n_replicas = 2;
  o.max_imbalance = 3;
  DpRouter r(o);
  const auto hot = hashes(0, 4);
  r.remember(0, hot);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.route(hot).replica, 0) << i;
  // Replica 0 is 3 ahead: the next one goes to replica 1, which then matches too.
  const DpChoice c = r.route(hot);
  EXPECT_EQ(c.replica, 1);
  EXPECT_FALSE(c.prefix_routed);
  EXPECT_EQ(r.route(hot).replica, 1);  // a tie now, and replica 1 is less loaded
}

TEST(DpRouterTest, UnhealthyAndExcludedReplicasAreSkipped) {
  DpRouter r = router(3);
  r.remember(1, hashes(0, 4));
  r.set_healthy(1, false);
  EXPECT_EQ(r.n_healthy(), 2);
  EXPECT_FALSE(r.healthy(1));
  const DpChoice c = r.route(hashes(0, 4));
  EXPECT_NE(c.replica, 1);
  EXPECT_FALSE(c.prefix_routed);
  EXPECT_EQ(r.route(hashes(100, 1), /*exclude=*/{0}).replica, 2);
  r.set_healthy(0, false);
  r.set_healthy(2, false);
  EXPECT_EQ(r.route(hashes(0, 4)).replica, -1);
  EXPECT_EQ(r.n_healthy(), 0);
  // Back in routing, with nothing remembered: it may have restarted with an empty cache.
  r.set_healthy(1, true);
  const DpChoice back = r.route(hashes(0, 4));
  EXPECT_EQ(back.replica, 1);
  EXPECT_FALSE(back.prefix_routed);
}

TEST(DpRouterTest, RememberedBlocksAreBoundedLeastRecentFirst) {
  DpRouterOptions o;
  o.n_replicas = 2;
  o.max_blocks_per_replica = 8;
  DpRouter r(o);
  r.remember(0, hashes(0, 4));     // a
  r.remember(0, hashes(1000, 4));  // b
  EXPECT_EQ(r.stats()[0].remembered_blocks, 8u);
  r.remember(0, hashes(0, 1));     // a's first block is touched
  r.remember(0, hashes(2000, 4));  // c: the least recent go, a's tail and b's last block
  EXPECT_EQ(r.stats()[0].remembered_blocks, 8u);
  const DpChoice ca = r.route(hashes(0, 4));
  EXPECT_EQ(ca.replica, 0);
  EXPECT_TRUE(ca.prefix_routed);
  EXPECT_EQ(ca.matched_blocks, 1);
  r.finish(0);
  // Routing a again made it the most recent; b, now the least recent, is gone.
  const DpChoice cb = r.route(hashes(1000, 4));
  EXPECT_EQ(cb.replica, 0);  // a miss on both idle replicas: the lowest index
  EXPECT_FALSE(cb.prefix_routed);
  EXPECT_EQ(r.stats()[0].remembered_blocks, 8u);
}

TEST(DpRouterTest, RoundRobinIgnoresPrefixesAndSkipsUnhealthy) {
  DpRouter r = router(3, DpRouting::kRoundRobin);
  const auto h = hashes(0, 4);
  std::vector<int> got;
  for (int i = 0; i < 4; ++i) got.push_back(r.route(h).replica);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0}));
  r.set_healthy(1, false);
  got.clear();
  for (int i = 0; i < 3; ++i) got.push_back(r.route(h).replica);
  EXPECT_EQ(got, (std::vector<int>{2, 0, 2}));
  EXPECT_EQ(r.stats()[0].prefix_routed, 0);
  EXPECT_EQ(r.stats()[0].routed, 3);
  EXPECT_EQ(r.stats()[0].in_flight, 3);
}

TEST(DpRouterTest, RoutingNames) {
  EXPECT_EQ(*parse_dp_routing("prefix"), DpRouting::kPrefix);
  EXPECT_EQ(*parse_dp_routing("round_robin"), DpRouting::kRoundRobin);
  const auto bad = parse_dp_routing("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prefix or round_robin"), std::string::npos);
}

TEST(DpMetricsTest, ReplicaLabelOnEverySampleOneHeaderPerFamily) {
  const std::string a =
      "# HELP vllm:prompt_tokens Prompt tokens.\n"
      "# TYPE vllm:prompt_tokens counter\n"
      "vllm:prompt_tokens_total{model_name=\"m\"} 10.0\n"
      "# HELP vllm:ttft Time to first token.\n"
      "# TYPE vllm:ttft histogram\n"
      "vllm:ttft_bucket{model_name=\"m\",le=\"1.0\"} 1.0\n"
      "vllm:ttft_bucket{model_name=\"m\",le=\"+Inf\"} 1.0\n"
      "vllm:ttft_sum{model_name=\"m\"} 0.5\n"
      "vllm:ttft_count{model_name=\"m\"} 1.0\n";
  std::string b = a;
  b.replace(b.find("10.0"), 4, "32.0");
  const std::string plain = "# TYPE up gauge\nup 1\n";
  const std::string merged = merge_replica_metrics({{0, a}, {1, b}, {2, plain}});
  EXPECT_EQ(merged,
            "# HELP vllm:prompt_tokens Prompt tokens.\n"
            "# TYPE vllm:prompt_tokens counter\n"
            "vllm:prompt_tokens_total{replica=\"0\",model_name=\"m\"} 10.0\n"
            "vllm:prompt_tokens_total{replica=\"1\",model_name=\"m\"} 32.0\n"
            "# HELP vllm:ttft Time to first token.\n"
            "# TYPE vllm:ttft histogram\n"
            "vllm:ttft_bucket{replica=\"0\",model_name=\"m\",le=\"1.0\"} 1.0\n"
            "vllm:ttft_bucket{replica=\"0\",model_name=\"m\",le=\"+Inf\"} 1.0\n"
            "vllm:ttft_sum{replica=\"0\",model_name=\"m\"} 0.5\n"
            "vllm:ttft_count{replica=\"0\",model_name=\"m\"} 1.0\n"
            "vllm:ttft_bucket{replica=\"1\",model_name=\"m\",le=\"1.0\"} 1.0\n"
            "vllm:ttft_bucket{replica=\"1\",model_name=\"m\",le=\"+Inf\"} 1.0\n"
            "vllm:ttft_sum{replica=\"1\",model_name=\"m\"} 0.5\n"
            "vllm:ttft_count{replica=\"1\",model_name=\"m\"} 1.0\n"
            "# TYPE up gauge\n"
            "up{replica=\"2\"} 1\n");
}

TEST(DpMetricsTest, RouterMetrics) {
  std::vector<DpReplicaStats> s(2);
  s[0].healthy = true;
  s[0].routed = 5;
  s[0].prefix_routed = 3;
  s[0].in_flight = 1;
  const std::string text = render_router_metrics(s, "m");
  EXPECT_NE(text.find("quantserve:dp_requests_routed_total{model_name=\"m\",replica=\"0\"} 5.0"),
            std::string::npos);
  EXPECT_NE(
      text.find("quantserve:dp_prefix_routed_requests_total{model_name=\"m\",replica=\"0\"} 3.0"),
      std::string::npos);
  EXPECT_NE(text.find("quantserve:dp_replica_healthy{model_name=\"m\",replica=\"1\"} 0.0"),
            std::string::npos);
  EXPECT_NE(text.find("quantserve:dp_requests_in_flight{model_name=\"m\",replica=\"0\"} 1.0"),
            std::string::npos);
}

}  // namespace
}  // namespace qs::server
