// diffusion: the messages of CFG parallelism (FluxPipeline::set_cfg_parallel) between rank 0,
// which takes the requests and decodes, and rank 1 (FluxPipeline::run_cfg_worker). Per
// true-CFG request: rank 0 broadcasts a job (the request's data fields; callbacks stay on rank
// 0), both ranks agree that they encoded their prompt, then each step all-gathers the two
// predictions and broadcasts rank 0's continue/stop flag. A stop message ends the worker.
// Every wait on the peer is bounded by what the peer has to do (cfg_peer_timeout).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "diffusion/flux_pipeline.h"
#include "dist/communicator.h"

namespace qs::diffusion {

// How long a rank waits on its peer when the peer does the same work this rank has just done
// in `own_seconds` (the other branch of the same step, the other prompt): 30 s for start-up
// skew and scheduling, plus 3x that work for a slower or busier peer.
double cfg_peer_timeout(double own_seconds);

// A request's data fields (not on_step / cancelled) as a job message, and back. Both ranks run
// the same build, so the fields travel in host byte order.
std::vector<uint8_t> encode_cfg_job(const FluxRequest& req);
Result<FluxRequest> decode_cfg_job(const std::vector<uint8_t>& bytes);
bool is_cfg_stop(const std::vector<uint8_t>& bytes);

// Rank 0: ends rank 1's run_cfg_worker(). A no-op on a broken group (its peer is gone).
Status send_cfg_stop(dist::Communicator& group);

// Every rank passes how its own preparation went (loading the pipeline, encoding its prompt),
// which took `own_seconds`: ok on every rank only if it was ok on every rank; otherwise each
// rank gets the first failed rank's message ("CFG-parallel rank 1: ..."), and a failed rank
// its own status.
Status cfg_agree(dist::Communicator& group, const Status& mine, double own_seconds);

// One step's exchange: this rank's prediction `mine` [n] in, both ranks' [2, n] out, rank 0's
// (the positive branch) first, as a batch-2 forward lays them out.
Status cfg_exchange_predictions(dist::Communicator& group, const std::vector<float>& mine,
                                std::vector<float>* both, double own_seconds);
// After a step: rank 0's *stop to rank 1.
Status cfg_exchange_stop(dist::Communicator& group, bool* stop, double own_seconds);

}  // namespace qs::diffusion
