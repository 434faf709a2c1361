// python: FluxCore, the engine behind quantserve.Omni on a diffusers pipeline (see
// diffusion_bindings.h). It builds the pipeline and its request as `quantserve generate-image`
// does, and hands back the image in the bytes generate-image writes to its PNG
// (diffusion::to_rgb8), so that a PIL image made from them equals the command's file.
#include "diffusion_bindings.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "diffusion/flux_pipeline.h"
#include "diffusion/png_image.h"
#include "interrupt_poll.h"
#include "io/hf_cache.h"
#include "py_status.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace qs::py {
namespace {

class FluxCore {
 public:
  // The pipeline's own vae/ decodes (generate-image's default --vae-decoder full).
  static Result<std::unique_ptr<FluxCore>> load(const std::string& model,
                                                const std::string& revision, int threads) {
    if (threads < 0 || threads > 1024) {
      return invalid_argument("threads must be in [1, 1024], got " + std::to_string(threads));
    }
    std::unique_ptr<FluxCore> core(new FluxCore());
    QS_ASSIGN_OR_RETURN(const std::string dir, io::resolve_model_dir(model, revision));
    QS_ASSIGN_OR_RETURN(core->pipeline_, diffusion::FluxPipeline::load(dir));
    core->pool_ =
        std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::default_threads());
    return core;
  }

  // With the GIL released. One image at a time: the pool is not shared between runs.
  Result<diffusion::FluxImage> generate(const diffusion::FluxRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    return pipeline_->generate(req, *pool_);
  }

  const diffusion::FluxPipeline& pipeline() const { return *pipeline_; }

 private:
  FluxCore() = default;

  std::unique_ptr<diffusion::FluxPipeline> pipeline_;
  std::unique_ptr<ThreadPool> pool_;
  std::mutex mu_;
};

// generate-image's request from its flags' values (cmd_generate_image.cc), here keyword
// arguments; the Python side has filled in every default.
diffusion::FluxRequest flux_request(const std::string& prompt, const std::string& negative_prompt,
                                    int64_t width, int64_t height, int64_t steps,
                                    double guidance_scale, double true_cfg_scale,
                                    int64_t max_sequence_length, uint64_t seed) {
  diffusion::FluxRequest req;
  req.prompt = prompt;
  req.negative_prompt = negative_prompt;
  req.width = width;
  req.height = height;
  req.steps = steps;
  req.guidance_scale = guidance_scale;
  req.true_cfg_scale = true_cfg_scale;
  req.max_sequence_length = max_sequence_length;
  req.seed = seed;
  return req;
}

// One image as (width, height, bytes of [height, width, 3] uint8 RGB).
nb::tuple generate_image(FluxCore& core, diffusion::FluxRequest req) {
  InterruptPoll interrupted;
  req.cancelled = [&interrupted] { return interrupted(); };
  std::optional<Result<diffusion::FluxImage>> image;
  {
    nb::gil_scoped_release release;
    image.emplace(core.generate(req));
  }
  interrupted.raise_if_interrupted();  // the pipeline's "cancelled after step i/n" is ours
  diffusion::FluxImage out = value_or_throw(std::move(*image));
  const std::vector<uint8_t> rgb8 = diffusion::to_rgb8(out.rgb);
  return nb::make_tuple(out.width, out.height,
                        nb::bytes(reinterpret_cast<const char*>(rgb8.data()), rgb8.size()));
}

}  // namespace

void bind_diffusion(nb::module_& m) {
  nb::class_<FluxCore>(m, "FluxCore")
      .def_static(
          "load",
          [](const std::string& model, const std::string& revision, int threads) {
            std::optional<Result<std::unique_ptr<FluxCore>>> loaded;
            {
              nb::gil_scoped_release release;
              loaded.emplace(FluxCore::load(model, revision, threads));
            }
            return value_or_throw(std::move(*loaded));
          },
          "model"_a, "revision"_a, "threads"_a)
      .def(
          "validate",
          [](const FluxCore& core, const std::string& prompt, const std::string& negative_prompt,
             int64_t width, int64_t height, int64_t steps, double guidance_scale,
             double true_cfg_scale, int64_t max_sequence_length) {
            check_ok(core.pipeline().validate(flux_request(prompt, negative_prompt, width, height,
                                                           steps, guidance_scale, true_cfg_scale,
                                                           max_sequence_length, 0)));
          },
          "prompt"_a, "negative_prompt"_a, "width"_a, "height"_a, "steps"_a, "guidance_scale"_a,
          "true_cfg_scale"_a, "max_sequence_length"_a)
      .def(
          "generate",
          [](FluxCore& core, const std::string& prompt, const std::string& negative_prompt,
             int64_t width, int64_t height, int64_t steps, double guidance_scale,
             double true_cfg_scale, int64_t max_sequence_length, uint64_t seed) {
            return generate_image(
                core, flux_request(prompt, negative_prompt, width, height, steps, guidance_scale,
                                   true_cfg_scale, max_sequence_length, seed));
          },
          "prompt"_a, "negative_prompt"_a, "width"_a, "height"_a, "steps"_a, "guidance_scale"_a,
          "true_cfg_scale"_a, "max_sequence_length"_a, "seed"_a)
      .def_prop_ro("default_size",
                   [](const FluxCore& core) { return core.pipeline().default_size(); });

  // The directory a model name loads from (a local path, or a repo id in the Hugging Face
  // cache), as every command's --model resolves it: Omni picks its engine by what is there.
  m.def(
      "resolve_model_dir",
      [](const std::string& model, const std::string& revision) {
        return value_or_throw(io::resolve_model_dir(model, revision));
      },
      "model"_a, "revision"_a = "");
}

}  // namespace qs::py
