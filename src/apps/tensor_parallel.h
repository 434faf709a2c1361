// apps: --tensor-parallel-size for the commands that run a decoder (serve, generate, bench
// latency, worker). Every rank of `mpirun -np N quantserve serve DIR --tensor-parallel-size N`
// runs the same command line: each loads its shard of the model, rank 0 goes on to run the
// command (its engine sends every step to the others), and the other ranks become workers
// (engine/tensor_parallel_worker.h) until rank 0 is done. `quantserve worker` is that second
// role alone, for launches that name the roles (mpirun's MPMD form `-np 1 ... : -np 1 ...`).
#pragma once

#include <memory>
#include <string>

#include "apps/flags.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "models/model.h"

namespace qs::apps {

// Adds --tensor-parallel-size N (default 1) and --distributed-timeout SECONDS.
void add_tensor_parallel_flags(Flags& flags);

// The group that --tensor-parallel-size asks for: null for 1; the MPI world for N > 1, which
// must have N ranks (an error that says how to start it otherwise), with the collective timeout
// of --distributed-timeout.
Result<std::shared_ptr<dist::Communicator>> tensor_parallel_group(const Flags& flags);

// Model::load on every rank of `group` (or alone without one). A rank that fails to load makes
// every rank fail, with that rank's reason where it is this rank's own, so that no rank is left
// waiting for a group that will never run.
Result<std::unique_ptr<models::Model>> load_tensor_parallel_model(
    const std::string& dir, models::LoadOptions options,
    const std::shared_ptr<dist::Communicator>& group);

// Rank 0's end of the group's life: tells the workers to return when it goes out of scope
// (however the command ends), so that mpirun's job ends with it.
class WorkerRelease {
 public:
  explicit WorkerRelease(dist::Communicator* group) : group_(group) {}
  ~WorkerRelease();
  WorkerRelease(const WorkerRelease&) = delete;
  WorkerRelease& operator=(const WorkerRelease&) = delete;

 private:
  dist::Communicator* group_;
};

// A rank other than 0: runs rank 0's steps on `threads` threads until it is done.
Status run_worker_rank(const models::Model& model, int threads);

}  // namespace qs::apps
