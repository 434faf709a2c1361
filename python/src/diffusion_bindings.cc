// python: FluxCore, the engine behind quantserve.Omni on a diffusers pipeline (see
// diffusion_bindings.h). It builds the pipeline and its request as `quantserve generate-image`
// does, and hands back the image in the bytes generate-image writes to its PNG
// (diffusion::to_rgb8), so that a PIL image made from them equals the command's file. Pixels
// and latents leave as memoryviews over the C++ buffers (nb::ndarray, each owning its buffer
// through a capsule): numpy views them without a copy, and nothing here needs numpy installed.
#include "diffusion_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <initializer_list>
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
  // `decode` false stops after the denoising loop: the image holds the latents only.
  Result<diffusion::FluxImage> generate(const diffusion::FluxRequest& req, bool decode) {
    std::lock_guard<std::mutex> lock(mu_);
    if (decode) return pipeline_->generate(req, *pool_);
    diffusion::FluxImage out;
    QS_ASSIGN_OR_RETURN(out.latents, pipeline_->denoise(req, *pool_));
    out.width = req.width, out.height = req.height;
    return out;
  }

  Result<diffusion::FluxImage> decode(std::vector<float> latents, int64_t width, int64_t height) {
    std::lock_guard<std::mutex> lock(mu_);
    return pipeline_->decode(std::move(latents), width, height, *pool_);
  }

  const diffusion::FluxPipeline& pipeline() const { return *pipeline_; }
  // The packed latents' channels: 4 x the VAE's latent channels (2 x 2 patches).
  int64_t channels() const { return pipeline_->transformer().config().in_channels; }

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

// A Python memoryview over `data`, which it takes: the capsule frees the vector when the last
// view of it (the memoryview, a numpy array made from it) is gone. A memoryview, not a numpy
// array, so that numpy stays optional: np.asarray wraps it without a copy, PIL reads it as is.
template <typename T>
nb::ndarray<nb::memview, T, nb::c_contig> owned_array(std::vector<T> data,
                                                      std::initializer_list<size_t> shape) {
  auto* held = new std::vector<T>(std::move(data));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::memview, T, nb::c_contig>(held->data(), shape, owner);
}

// What Omni turns into outputs: (width, height, rgb8, rgb, latents). rgb8 is the PNG's bytes,
// uint8 [height, width, 3]; rgb the pipeline's float32 [height, width, 3] in [0, 1] (diffusers'
// output_type="np"), only when asked for; latents the final packed latents, float32
// [n_img, channels] (diffusers' output_type="latent"). A run that did not decode has None for
// both images.
nb::tuple image_arrays(diffusion::FluxImage out, int64_t channels, bool want_rgb) {
  const auto h = static_cast<size_t>(out.height), w = static_cast<size_t>(out.width);
  nb::object rgb8 = nb::none(), rgb = nb::none();
  if (!out.rgb.empty()) {
    rgb8 = nb::cast(owned_array(diffusion::to_rgb8(out.rgb), {h, w, 3}));
    if (want_rgb) rgb = nb::cast(owned_array(std::move(out.rgb), {h, w, 3}));
  }
  const size_t n_img = out.latents.size() / static_cast<size_t>(channels);
  nb::object latents =
      nb::cast(owned_array(std::move(out.latents), {n_img, static_cast<size_t>(channels)}));
  return nb::make_tuple(out.width, out.height, rgb8, rgb, latents);
}

// output_type as diffusers names it: "pil" and "np" decode (np also returns the float image),
// "latent" stops before the decoder.
struct OutputType {
  bool decode = true, float_rgb = false;
};

OutputType output_type(const std::string& name) {
  if (name == "pil") return {};
  if (name == "np") return {true, true};
  if (name == "latent") return {false, false};
  throw_status(invalid_argument("output_type must be 'pil', 'np' or 'latent', got '" + name + "'"));
}

nb::tuple generate_image(FluxCore& core, diffusion::FluxRequest req, const std::string& type) {
  const OutputType out_type = output_type(type);
  InterruptPoll interrupted;
  req.cancelled = [&interrupted] { return interrupted(); };
  std::optional<Result<diffusion::FluxImage>> image;
  without_gil("generating an image (lower height, width or num_images_per_prompt)",
              [&] { image.emplace(core.generate(req, out_type.decode)); });
  interrupted.raise_if_interrupted();  // the pipeline's "cancelled after step i/n" is ours
  return image_arrays(value_or_throw(std::move(*image)), core.channels(), out_type.float_rgb);
}

}  // namespace

void bind_diffusion(nb::module_& m) {
  nb::class_<FluxCore>(m, "FluxCore")
      .def_static(
          "load",
          [](const std::string& model, const std::string& revision, int threads) {
            std::optional<Result<std::unique_ptr<FluxCore>>> loaded;
            without_gil("loading the pipeline",
                        [&] { loaded.emplace(FluxCore::load(model, revision, threads)); });
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
             double true_cfg_scale, int64_t max_sequence_length, uint64_t seed,
             const std::string& output_type) {
            return generate_image(
                core,
                flux_request(prompt, negative_prompt, width, height, steps, guidance_scale,
                             true_cfg_scale, max_sequence_length, seed),
                output_type);
          },
          "prompt"_a, "negative_prompt"_a, "width"_a, "height"_a, "steps"_a, "guidance_scale"_a,
          "true_cfg_scale"_a, "max_sequence_length"_a, "seed"_a, "output_type"_a = "pil")
      // Packed latents [n_img, channels] (as generate returns them) through the pipeline's
      // decoder: the same tuple generate returns for output_type "np".
      .def(
          "decode",
          [](FluxCore& core, nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu> z,
             int64_t width, int64_t height) {
            if (static_cast<int64_t>(z.shape(1)) != core.channels()) {
              throw_status(invalid_argument(
                  "latents must be [n_img, " + std::to_string(core.channels()) + "], got [" +
                  std::to_string(z.shape(0)) + ", " + std::to_string(z.shape(1)) + "]"));
            }
            std::vector<float> latents(z.data(), z.data() + z.size());
            std::optional<Result<diffusion::FluxImage>> image;
            without_gil("decoding latents",
                        [&] { image.emplace(core.decode(std::move(latents), width, height)); });
            return image_arrays(value_or_throw(std::move(*image)), core.channels(), true);
          },
          "latents"_a, "width"_a, "height"_a)
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
