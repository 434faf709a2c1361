// server: the routing policy of data-parallel serving (`serve --data-parallel-size N`), as
// plain logic with no I/O: which of N engine replicas gets a request. Prefix routing (vLLM's
// prefix-aware routing) sends a prompt to the replica that most likely holds its longest
// prefix in its prefix cache, judged by the chained hashes of the prompt's full blocks that
// were routed there before; a miss, or a tie, goes to the replica with the fewest requests in
// flight, then the lowest index. Round-robin is the baseline it is measured against.
// Thread-safe: HTTP threads route and finish while the health monitor marks replicas.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "models/multimodal.h"

namespace qs::server {

enum class DpRouting { kPrefix, kRoundRobin };

// "prefix" | "round_robin" (the --data-parallel-routing values).
Result<DpRouting> parse_dp_routing(const std::string& name);
const char* dp_routing_name(DpRouting routing);

// The engine's KV block: the prefix cache reuses whole blocks only, so only whole blocks
// count for routing (engine::EngineConfig::block_size).
inline constexpr int kDpBlockSize = 16;

// One hash per full block of `ids`, each chaining the one before, so equal hashes at block i
// mean equal prompts up to the end of block i (as the engine's prefix cache keys its blocks).
// A multimodal item's content hash is folded into every block from the one holding its first
// placeholder on, since placeholder ids alone do not say which image they stand for; the
// chain stops before the block of an item that has no hash (the engine does not cache it).
std::vector<uint64_t> prompt_block_hashes(const std::vector<int32_t>& ids,
                                          const std::vector<models::MultimodalItem>& items = {},
                                          int block_size = kDpBlockSize);

struct DpRouterOptions {
  int n_replicas = 1;
  DpRouting routing = DpRouting::kPrefix;
  // A replica's match counts only from this many blocks on: a block or two in common (a chat
  // template's header) says little about what its cache holds.
  int64_t min_prefix_blocks = 1;
  // Block hashes remembered per replica (least recently routed forgotten first), so the
  // router's memory stays bounded: 65536 blocks of 16 are 1M tokens, past the KV cache a CPU
  // replica holds.
  size_t max_blocks_per_replica = 65536;
  // A prefix match is ignored when its replica already has this many more requests in flight
  // than the least loaded one, so one hot prefix cannot pile every request onto one replica.
  int64_t max_imbalance = 8;
};

struct DpChoice {
  int replica = -1;            // -1: no healthy replica (the caller answers 503)
  int64_t matched_blocks = 0;  // blocks of the prompt this replica was routed before
  bool prefix_routed = false;  // chosen for its prefix rather than its load
};

// Per replica, for /metrics.
struct DpReplicaStats {
  bool healthy = false;
  int64_t in_flight = 0;
  int64_t routed = 0;         // requests sent there
  int64_t prefix_routed = 0;  // of those, chosen for a prefix match
  size_t remembered_blocks = 0;
};

class DpRouter {
 public:
  explicit DpRouter(DpRouterOptions options);

  // Picks a healthy replica not in `exclude` for a prompt with these block hashes (empty: a
  // request whose prompt the front could not tokenize, routed by load), counts it in flight
  // there and remembers the hashes as that replica's. Call finish() when it ends.
  DpChoice route(const std::vector<uint64_t>& hashes, const std::vector<int>& exclude = {});
  // Remembers more prompts of a request that route() placed (a list of prompts).
  void remember(int replica, const std::vector<uint64_t>& hashes);
  void finish(int replica);

  // A replica leaves routing while unhealthy; its remembered blocks are dropped, since a
  // replica that comes back may have restarted with an empty cache.
  void set_healthy(int replica, bool healthy);
  bool healthy(int replica) const;
  int n_healthy() const;
  int n_replicas() const { return static_cast<int>(replicas_.size()); }
  DpRouting routing() const { return options_.routing; }

  std::vector<DpReplicaStats> stats() const;

 private:
  // Block hashes in least-recently-routed order, with an index into the list.
  struct Lru {
    std::list<uint64_t> order;  // front: most recent
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where;
  };
  struct Replica {
    bool healthy = true;
    int64_t in_flight = 0;
    int64_t routed = 0;
    int64_t prefix_routed = 0;
    Lru blocks;
  };

  int64_t matched_blocks(const Replica& r, const std::vector<uint64_t>& hashes) const;
  void remember_locked(Replica& r, const std::vector<uint64_t>& hashes);

  const DpRouterOptions options_;
  mutable std::mutex mu_;
  std::vector<Replica> replicas_;
  size_t next_round_robin_ = 0;
};

}  // namespace qs::server
