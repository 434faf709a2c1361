// apps: tensor-parallel launch (see tensor_parallel.h).
#include "apps/tensor_parallel.h"

#include <cstdio>
#include <cstdlib>

#include "apps/commands.h"
#include "apps/model_flags.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/tensor_parallel_worker.h"

namespace qs::apps {

void add_tensor_parallel_flags(Flags& flags) {
  flags
      .add("tensor-parallel-size",
           "split every layer over this many ranks: start the command as `mpirun -np N "
           "quantserve ...`; rank 0 does the command's work, the others compute their shards",
           false, "1")
      .add("distributed-timeout",
           "seconds a rank waits in a collective for the others before it gives up (a rank "
           "that died or hangs); the server then reports unhealthy and exits",
           false, "60");
}

Result<std::shared_ptr<dist::Communicator>> tensor_parallel_group(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(int64_t size, flags.get_int("tensor-parallel-size"));
  QS_ASSIGN_OR_RETURN(double timeout, flags.get_double("distributed-timeout"));
  if (size < 1 || size > 4096) return invalid_argument("--tensor-parallel-size must be 1 to 4096");
  if (!(timeout >= 0)) return invalid_argument("--distributed-timeout must be 0 or more");
  if (size == 1) return std::shared_ptr<dist::Communicator>();
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> world, dist::world());
  if (world->size() != size) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(size) + " needs " +
                            std::to_string(size) + " ranks; this process is one of " +
                            std::to_string(world->size()) + ". Start it as `mpirun -np " +
                            std::to_string(size) +
                            " quantserve ...` (with --hostfile across hosts)");
  }
  world->set_timeout(timeout);
  return world;
}

Result<std::unique_ptr<models::Model>> load_tensor_parallel_model(
    const std::string& dir, models::LoadOptions options,
    const std::shared_ptr<dist::Communicator>& group) {
  options.tensor_parallel = group;
  auto model = models::Model::load(dir, options);
  if (group == nullptr) return model;
  // Every rank learns whether all loaded; the first failure's rank is named.
  const int32_t mine = model.ok() ? 1 : 0;
  std::vector<int32_t> all(group->size());
  QS_RETURN_IF_ERROR(group->all_gather(&mine, sizeof(mine), all.data()));
  for (int r = 0; r < group->size(); ++r) {
    if (all[r] != 0) continue;
    if (r == group->rank()) return model.status();
    return unavailable("tensor parallel rank " + std::to_string(r) + " failed to load " + dir +
                       " (its log says why)");
  }
  QS_LOG_INFO("tensor parallel rank %d of %d loaded its shard of %s (%.1f MiB resident)",
              group->rank(), group->size(), dir.c_str(),
              static_cast<double>((*model)->resident_weight_bytes()) / (1 << 20));
  return model;
}

WorkerRelease::~WorkerRelease() {
  if (group_ == nullptr || !group_->health().ok()) return;
  Status s = engine::send_stop(*group_);
  if (!s.ok()) QS_LOG_WARN("releasing the tensor-parallel workers: %s", s.message().c_str());
}

Status run_worker_rank(const models::Model& model, int threads) {
  ThreadPool pool(threads);
  QS_ASSIGN_OR_RETURN(engine::WorkerStats stats, engine::run_tensor_parallel_worker(model, pool));
  QS_LOG_INFO("tensor parallel rank %d: done after %lld steps", model.tensor_parallel()->rank(),
              static_cast<long long>(stats.steps));
  return ok_status();
}

namespace {

constexpr const char* kWorkerUsage = "worker MODEL_DIR --tensor-parallel-size N";

Status run_worker_command(const Flags& flags) {
  const std::string name =
      !flags.positionals().empty() ? flags.positionals()[0] : flags.get("model");
  if (name.empty()) return invalid_argument("give the model directory");
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, name));
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> group, tensor_parallel_group(flags));
  if (group == nullptr || group->rank() == 0) {
    return invalid_argument(
        "a worker is a rank other than 0 of a tensor-parallel group: start it with mpirun "
        "beside rank 0's `quantserve serve` (or run serve on every rank)");
  }
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, load_tensor_parallel_model(dir, load, group));
  return run_worker_rank(*model, static_cast<int>(std::max<int64_t>(threads, 1)));
}

}  // namespace

int cmd_worker(const Args& args) {
  if (std::getenv("QS_LOG_LEVEL") == nullptr) set_log_level(LogLevel::kInfo);
  Flags flags;
  flags.takes_positionals("MODEL_DIR");
  flags.add("model", "checkpoint directory (or give it as the first argument)")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()));
  add_tensor_parallel_flags(flags);
  add_model_flags(flags);
  Status parsed = flags.parse(args);
  if (parsed.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kWorkerUsage).c_str());
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "quantserve worker: %s\n\n%s", parsed.message().c_str(),
                 flags.usage(kWorkerUsage).c_str());
    return 2;
  }
  if (Status s = run_worker_command(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve worker: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
