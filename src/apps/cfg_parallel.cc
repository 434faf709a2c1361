// apps: --cfg-parallel-size (see cfg_parallel.h).
#include "apps/cfg_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/log.h"
#include "core/thread_pool.h"
#include "diffusion/flux_cfg_parallel.h"

namespace qs::apps {
namespace {

// Ranks mpirun started on this host: Open MPI's and MPICH's launchers say so in the
// environment; 1 when neither did.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

}  // namespace

Result<CfgParallelSetup> cfg_parallel_setup(const Flags& flags, int threads) {
  QS_ASSIGN_OR_RETURN(int64_t size, flags.get_int("cfg-parallel-size"));
  if (size != 1 && size != 2) {
    return invalid_argument(
        "--cfg-parallel-size must be 1 or 2 (one rank per guidance branch), got " +
        std::to_string(size));
  }
  CfgParallelSetup setup;
  setup.threads = threads;
  if (size == 1) {
    if (dist::launched_by_mpi()) {
      QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> world, dist::world());
      if (world->size() > 1) {
        return invalid_argument("mpirun started " + std::to_string(world->size()) +
                                " ranks, but an image pipeline uses more than one only with "
                                "--cfg-parallel-size 2");
      }
    }
    return setup;
  }
  if (!dist::launched_by_mpi()) {
    return invalid_argument(
        "--cfg-parallel-size 2 runs the two guidance branches in two processes: run it under "
        "mpirun -np 2");
  }
  QS_ASSIGN_OR_RETURN(setup.group, dist::world());
  if (setup.group->size() != 2) {
    return invalid_argument("--cfg-parallel-size 2 needs exactly 2 ranks; mpirun started " +
                            std::to_string(setup.group->size()) +
                            " (tensor parallelism inside a CFG branch group is not implemented "
                            "for diffusion)");
  }
  if (!flags.has("threads")) setup.threads = std::max(1, threads / local_ranks());
  return setup;
}

Result<std::unique_ptr<diffusion::DiffusionPipeline>> load_cfg_pipeline(
    const std::string& dir, const diffusion::PipelineLoadOptions& options,
    const std::shared_ptr<dist::Communicator>& group) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<diffusion::DiffusionPipeline>> pipeline =
      diffusion::load_pipeline(dir, options);
  if (!group) return pipeline;
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Joining is part of the outcome the ranks agree on: a family without CFG parallelism
  // refuses it on both alike. (Joining sets no state a later set_cfg_parallel cannot
  // replace, and every collective sets its own timeout; serve joins again with its on_broken.)
  Status loaded = pipeline.status();
  if (loaded.ok()) loaded = (*pipeline)->set_cfg_parallel(group);
  QS_RETURN_IF_ERROR(diffusion::cfg_agree(*group, loaded, load_s));
  return pipeline;
}

CfgWorkerStop::~CfgWorkerStop() {
  if (!group_ || group_->rank() != 0) return;
  if (Status s = diffusion::send_cfg_stop(*group_); !s.ok())
    QS_LOG_WARN("CFG-parallel: could not stop rank 1: %s", s.message().c_str());
}

}  // namespace qs::apps
