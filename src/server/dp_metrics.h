// server: /metrics of a data-parallel front end. Each replica's own exposition (vLLM's metric
// set, from its /metrics) comes back with a replica="i" label on every sample and its families
// merged, one HELP/TYPE per family as the text format requires; the router's own counters
// (requests routed per replica, prefix-routed requests, health, requests in flight) follow.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/dp_router.h"

namespace qs::server {

// (replica index, that replica's /metrics body) in any order; families keep the order in
// which they first appear, samples the order of the replicas given.
std::string merge_replica_metrics(const std::vector<std::pair<int, std::string>>& replicas);

// The router's metrics, one series per replica, labelled like vLLM's (model_name) plus
// replica="i".
std::string render_router_metrics(const std::vector<DpReplicaStats>& stats,
                                  const std::string& model_name);

}  // namespace qs::server
