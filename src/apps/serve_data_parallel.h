// apps: `quantserve serve MODEL --data-parallel-size N` (vLLM's flag): N engine replicas of the
// model behind one OpenAI endpoint, each request routed to the replica with the longest cached
// prefix, else the least loaded (--data-parallel-routing prefix | round_robin).
//
// Without mpirun, the replicas are child processes on this machine, each `quantserve serve`
// with the same flags on a free loopback port and --threads/N threads. Under mpirun with N
// ranks (possibly on several hosts), each rank runs one replica on its own addresses and rank 0
// also runs the front end; the ranks exchange the replicas' addresses with all_gather. The front
// end itself (routing, relaying, health, metrics) is server::DpFront (server/dp_front.h).
#pragma once

#include <signal.h>

#include <string>

#include "apps/flags.h"
#include "core/status.h"

namespace qs::apps {

// Whether `serve` was asked for data-parallel replicas (--data-parallel-size other than 1;
// a malformed value too, for run_data_parallel to report).
bool data_parallel_requested(const Flags& flags);

// Runs the front end and its replicas until SIGINT/SIGTERM (blocked by the caller in
// `signals`, taken here by sigwait), then stops the replicas and returns.
Status run_data_parallel(const Flags& flags, const std::string& dir, sigset_t* signals);

}  // namespace qs::apps
