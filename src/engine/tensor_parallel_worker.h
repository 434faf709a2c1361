// engine: the step plan that rank 0 of a tensor-parallel group sends to the other ranks, and the
// loop those ranks run (vLLM's workers). Rank 0 runs the HTTP server, tokenizer, scheduler and
// sampler; before every forward call it broadcasts the batch (token ids, block tables,
// multimodal embeddings), and every rank runs the same forward on its shard of the weights and
// of the KV cache, which all ranks allocate alike from the configuration rank 0 sends once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "engine/kv_cache.h"
#include "models/model.h"

namespace qs::engine {

// Rank 0's side. send_cache when an engine is made (Engine::create: the workers allocate their
// shard of its cache, replacing the last one), send_batch before every forward call, send_stop
// once rank 0 is done with the group (the workers then return from run_tensor_parallel_worker).
Status send_cache(dist::Communicator& comm, const KvCacheConfig& config);
// `hidden`: the width of the batch's embedding spans (the model's hidden_size).
Status send_batch(dist::Communicator& comm, const models::ForwardBatch& batch, int64_t hidden);
Status send_stop(dist::Communicator& comm);
// A round trip through every rank (a broadcast and a barrier), which fails within the group's
// timeout when one of them died or hangs: how an idle rank 0 notices.
Status ping(dist::Communicator& comm);

struct WorkerStats {
  int64_t steps = 0;
  int64_t failed_steps = 0;  // forward calls that failed here as they failed on rank 0
};

// Ranks 1..size-1: allocates this rank's shard of each KV cache rank 0 announces and runs every
// batch rank 0 sends, until it sends stop (ok) or the group breaks (the communicator's error).
// `model` must have been loaded with this communicator.
Result<WorkerStats> run_tensor_parallel_worker(const models::Model& model, ThreadPool& pool);

}  // namespace qs::engine
