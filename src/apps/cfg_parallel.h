// apps: --cfg-parallel-size for the image commands (generate-image, and serve of a pipeline
// directory), vLLM-Omni's flag: 2 runs the two true-CFG branches on the two ranks that
// `mpirun -np 2` started (DiffusionPipeline::set_cfg_parallel; FLUX.1 has it). Rank 0 does what
// the command does alone; rank 1 only runs the negative branch of rank 0's requests.
#pragma once

#include <memory>
#include <string>

#include "apps/flags.h"
#include "core/status.h"
#include "diffusion/pipeline.h"
#include "dist/communicator.h"

namespace qs::apps {

struct CfgParallelSetup {
  std::shared_ptr<dist::Communicator> group;  // null: one process (--cfg-parallel-size 1)
  int threads = 1;                            // this rank's worker threads
  bool worker() const { return group && group->rank() != 0; }
};

// From --cfg-parallel-size (1 or 2) and `threads` (--threads, or the default): with 2,
// mpirun's world, which must hold exactly 2 ranks (no tensor parallelism inside a branch
// group); with 1, a world of one rank. Ranks that mpirun put on one host share its cores, so
// without --threads each takes its share of them.
Result<CfgParallelSetup> cfg_parallel_setup(const Flags& flags, int threads);

// diffusion::load_pipeline on every rank of `group`, which agree on the outcome (a rank that
// failed to load, or a family without CFG parallelism, ends every rank with its message instead
// of leaving the other waiting for jobs); the pipeline joins the group. Without a group, the
// pipeline alone.
Result<std::unique_ptr<diffusion::DiffusionPipeline>> load_cfg_pipeline(
    const std::string& dir, const diffusion::PipelineLoadOptions& options,
    const std::shared_ptr<dist::Communicator>& group);

// Rank 0: ends rank 1's worker loop when it goes out of scope, whichever way the command ends,
// so that rank 1 exits with it (no-op without a group).
class CfgWorkerStop {
 public:
  explicit CfgWorkerStop(std::shared_ptr<dist::Communicator> group) : group_(std::move(group)) {}
  ~CfgWorkerStop();
  CfgWorkerStop(const CfgWorkerStop&) = delete;
  CfgWorkerStop& operator=(const CfgWorkerStop&) = delete;

 private:
  std::shared_ptr<dist::Communicator> group_;
};

}  // namespace qs::apps
