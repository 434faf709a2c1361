// diffusion: what every DiffusionPipeline shares (see pipeline.h).
#include "diffusion/pipeline.h"

#include "diffusion/pipeline_registry.h"

namespace qs::diffusion {

const char* pipeline_output_name(PipelineOutput output) {
  return output == PipelineOutput::kVideo ? "video" : "image";
}

PipelineOutput DiffusionPipeline::output() const {
  return family().output;
}

Result<DiffusionOutput> DiffusionPipeline::generate(DiffusionRequest req, ThreadPool& pool) const {
  req = resolve(std::move(req));
  QS_RETURN_IF_ERROR(validate(req));
  DiffusionOutput times;
  QS_ASSIGN_OR_RETURN(std::vector<float> latents, denoise(req, pool, &times));
  QS_ASSIGN_OR_RETURN(DiffusionOutput out, decode(std::move(latents), req, pool));
  out.step_seconds = std::move(times.step_seconds);
  out.exchange_seconds = std::move(times.exchange_seconds);
  return out;
}

namespace {

Status no_cfg_parallel(const PipelineFamilySpec& family) {
  return unimplemented(
      std::string("CFG parallelism (--cfg-parallel-size) is not implemented for ") + family.name +
      " pipelines");
}

}  // namespace

Status DiffusionPipeline::set_cfg_parallel(std::shared_ptr<dist::Communicator>,
                                           std::function<void(const Status&)>) {
  return no_cfg_parallel(family());
}

Status DiffusionPipeline::run_cfg_worker(ThreadPool&) const {
  return no_cfg_parallel(family());
}

Result<std::unique_ptr<DiffusionPipeline>> load_pipeline(const std::string& dir,
                                                         const PipelineLoadOptions& options) {
  QS_ASSIGN_OR_RETURN(const PipelineIndex index, read_pipeline_index(dir));
  return index.family->load(index, options);
}

Status refuse_field(const PipelineFamilySpec& family, const char* field, const char* why) {
  return invalid_argument(std::string(field) + " does not apply to " + family.name +
                          " pipelines (" + why + ")");
}

}  // namespace qs::diffusion
