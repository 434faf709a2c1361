// server: data-parallel routing policy (see dp_router.h).
#include "server/dp_router.h"

#include <algorithm>

#include "core/check.h"

namespace qs::server {
namespace {

// splitmix64's finaliser: every input bit moves every output bit, so chained block hashes of
// prompts that differ in one token differ everywhere after it.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t chain_hash(uint64_t h, uint64_t v) {
  return mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

}  // namespace

Result<DpRouting> parse_dp_routing(const std::string& name) {
  if (name == "prefix") return DpRouting::kPrefix;
  if (name == "round_robin") return DpRouting::kRoundRobin;
  return invalid_argument("--data-parallel-routing must be prefix or round_robin, got '" + name +
                          "'");
}

const char* dp_routing_name(DpRouting routing) {
  return routing == DpRouting::kPrefix ? "prefix" : "round_robin";
}

std::vector<uint64_t> prompt_block_hashes(const std::vector<int32_t>& ids,
                                          const std::vector<models::MultimodalItem>& items,
                                          int block_size) {
  QS_CHECK(block_size > 0);
  const size_t n_blocks = ids.size() / static_cast<size_t>(block_size);
  std::vector<uint64_t> out;
  out.reserve(n_blocks);
  uint64_t h = 0x51ed270b27a3f8d1ull;
  for (size_t b = 0; b < n_blocks; ++b) {
    const int64_t begin = static_cast<int64_t>(b) * block_size;
    const int64_t end = begin + block_size;
    for (int64_t i = begin; i < end; ++i) h = chain_hash(h, static_cast<uint32_t>(ids[i]));
    for (const models::MultimodalItem& item : items) {
      if (item.offset < begin || item.offset >= end) continue;
      if (item.hash == 0) return out;
      h = chain_hash(h, item.hash);
    }
    out.push_back(h);
  }
  return out;
}

DpRouter::DpRouter(DpRouterOptions options)
    : options_(options), replicas_(static_cast<size_t>(std::max(options.n_replicas, 0))) {
  QS_CHECK(options_.n_replicas >= 1);
}

int64_t DpRouter::matched_blocks(const Replica& r, const std::vector<uint64_t>& hashes) const {
  int64_t n = 0;
  for (uint64_t h : hashes) {
    if (!r.blocks.where.count(h)) break;
    ++n;
  }
  return n;
}

void DpRouter::remember_locked(Replica& r, const std::vector<uint64_t>& hashes) {
  if (options_.max_blocks_per_replica == 0) return;
  // Last block first, so that the prompt's first blocks end up most recent: a match needs a
  // prompt's blocks from the start, and the first ones are the ones other prompts share.
  for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) {
    auto found = r.blocks.where.find(*it);
    if (found != r.blocks.where.end()) {
      r.blocks.order.splice(r.blocks.order.begin(), r.blocks.order, found->second);
    } else {
      r.blocks.order.push_front(*it);
      r.blocks.where.emplace(*it, r.blocks.order.begin());
    }
  }
  while (r.blocks.order.size() > options_.max_blocks_per_replica) {
    r.blocks.where.erase(r.blocks.order.back());
    r.blocks.order.pop_back();
  }
}

DpChoice DpRouter::route(const std::vector<uint64_t>& hashes, const std::vector<int>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  const int n = n_replicas();
  auto eligible = [&](int i) {
    return replicas_[i].healthy && std::find(exclude.begin(), exclude.end(), i) == exclude.end();
  };
  DpChoice choice;
  if (options_.routing == DpRouting::kRoundRobin) {
    for (int k = 0; k < n && choice.replica < 0; ++k) {
      const int i = static_cast<int>((next_round_robin_ + static_cast<size_t>(k)) % n);
      if (eligible(i)) choice.replica = i;
    }
    if (choice.replica >= 0) next_round_robin_ = static_cast<size_t>(choice.replica) + 1;
  } else {
    // Least loaded first (lowest index on ties): the answer for a miss, and the bound on how
    // far a prefix match may pull a request away from it.
    int least = -1;
    for (int i = 0; i < n; ++i) {
      if (eligible(i) && (least < 0 || replicas_[i].in_flight < replicas_[least].in_flight)) {
        least = i;
      }
    }
    choice.replica = least;
    if (least >= 0) {
      int best = -1;
      int64_t best_blocks = 0;
      for (int i = 0; i < n; ++i) {
        if (!eligible(i)) continue;
        if (replicas_[i].in_flight - replicas_[least].in_flight >= options_.max_imbalance) {
          continue;
        }
        const int64_t m = matched_blocks(replicas_[i], hashes);
        if (m < options_.min_prefix_blocks) continue;
        if (best < 0 || m > best_blocks ||
            (m == best_blocks && replicas_[i].in_flight < replicas_[best].in_flight)) {
          best = i;
          best_blocks = m;
        }
      }
      if (best >= 0) {
        choice.replica = best;
        choice.matched_blocks = best_blocks;
        choice.prefix_routed = true;
      }
    }
  }
  if (choice.replica < 0) return choice;
  Replica& r = replicas_[choice.replica];
  if (choice.matched_blocks == 0) choice.matched_blocks = matched_blocks(r, hashes);
  ++r.in_flight;
  ++r.routed;
  if (choice.prefix_routed) ++r.prefix_routed;
  remember_locked(r, hashes);
  return choice;
}

void DpRouter::remember(int replica, const std::vector<uint64_t>& hashes) {
  std::lock_guard<std::mutex> lock(mu_);
  QS_CHECK(replica >= 0 && replica < n_replicas());
  remember_locked(replicas_[replica], hashes);
}

void DpRouter::finish(int replica) {
  std::lock_guard<std::mutex> lock(mu_);
  QS_CHECK(replica >= 0 && replica < n_replicas());
  QS_CHECK(replicas_[replica].in_flight > 0);
  --replicas_[replica].in_flight;
}

void DpRouter::set_healthy(int replica, bool healthy) {
  std::lock_guard<std::mutex> lock(mu_);
  QS_CHECK(replica >= 0 && replica < n_replicas());
  Replica& r = replicas_[replica];
  if (r.healthy && !healthy) {
    r.blocks.order.clear();
    r.blocks.where.clear();
  }
  r.healthy = healthy;
}

bool DpRouter::healthy(int replica) const {
  std::lock_guard<std::mutex> lock(mu_);
  QS_CHECK(replica >= 0 && replica < n_replicas());
  return replicas_[replica].healthy;
}

int DpRouter::n_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count_if(replicas_.begin(), replicas_.end(),
                                        [](const Replica& r) { return r.healthy; }));
}

std::vector<DpReplicaStats> DpRouter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DpReplicaStats> out;
  for (const Replica& r : replicas_) {
    DpReplicaStats s;
    s.healthy = r.healthy;
    s.in_flight = r.in_flight;
    s.routed = r.routed;
    s.prefix_routed = r.prefix_routed;
    s.remembered_blocks = r.blocks.order.size();
    out.push_back(s);
  }
  return out;
}

}  // namespace qs::server
