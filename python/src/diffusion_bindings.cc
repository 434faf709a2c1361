// python: FluxCore and WanCore, the engines behind quantserve.Omni on a diffusers pipeline (see
// diffusion_bindings.h). Each builds its pipeline and request as the command does
// (`quantserve generate-image`, `quantserve generate-video`) and hands back the pixels in the
// bytes the command writes to its PNGs (diffusion::to_rgb8), so that a PIL image made from them
// equals the command's file. Pixels and latents leave as memoryviews over the C++ buffers
// (nb::ndarray, each owning its buffer through a capsule): numpy views them without a copy, and
// nothing here needs numpy installed.
#include "diffusion_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
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
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"
#include "diffusion/png_image.h"
#include "diffusion/wan_pipeline.h"
#include "interrupt_poll.h"
#include "io/hf_cache.h"
#include "py_status.h"
#include "vision/image_file.h"
#include "vision/vae_image_input.h"
#include "vision/video_writer.h"

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

class WanCore {
 public:
  static Result<std::unique_ptr<WanCore>> load(const std::string& model,
                                               const std::string& revision, int threads) {
    if (threads < 0 || threads > 1024) {
      return invalid_argument("threads must be in [1, 1024], got " + std::to_string(threads));
    }
    std::unique_ptr<WanCore> core(new WanCore());
    QS_ASSIGN_OR_RETURN(const std::string dir, io::resolve_model_dir(model, revision));
    QS_ASSIGN_OR_RETURN(core->pipeline_, diffusion::WanPipeline::load(dir));
    core->pool_ =
        std::make_unique<ThreadPool>(threads > 0 ? threads : ThreadPool::default_threads());
    return core;
  }

  // With the GIL released. One video at a time: the pool is not shared between runs.
  // WanPipeline::generate is generate-video's denoise-then-decode; `decode` false stops after
  // the denoising loop and the video holds the latents only.
  Result<diffusion::WanVideo> generate(const diffusion::WanRequest& req, bool decode) {
    std::lock_guard<std::mutex> lock(mu_);
    if (decode) return pipeline_->generate(req, *pool_);
    diffusion::WanVideo out;
    QS_ASSIGN_OR_RETURN(out.latents, pipeline_->denoise(req, *pool_));
    out.width = req.width, out.height = req.height, out.frames = req.num_frames;
    return out;
  }

  Result<diffusion::WanVideo> decode(std::vector<float> latents, int64_t frames, int64_t height,
                                     int64_t width) {
    std::lock_guard<std::mutex> lock(mu_);
    return pipeline_->decode(std::move(latents), frames, height, width, *pool_);
  }

  const diffusion::WanPipeline& pipeline() const { return *pipeline_; }

 private:
  WanCore() = default;

  std::unique_ptr<diffusion::WanPipeline> pipeline_;
  std::unique_ptr<ThreadPool> pool_;
  std::mutex mu_;
};

// generate-video's request from its flags' values (cmd_generate_video.cc), here keyword
// arguments; the Python side has filled in every default. The optional ones left unset take
// the pipeline directory's own values, as the flags do.
diffusion::WanRequest wan_request(const std::string& prompt, const std::string& negative_prompt,
                                  int64_t width, int64_t height, int64_t num_frames, int64_t steps,
                                  double guidance_scale, std::optional<double> guidance_scale_2,
                                  std::optional<double> boundary_ratio,
                                  std::optional<double> flow_shift, int64_t max_sequence_length,
                                  uint64_t seed) {
  diffusion::WanRequest req;
  req.prompt = prompt;
  req.negative_prompt = negative_prompt;
  req.width = width;
  req.height = height;
  req.num_frames = num_frames;
  req.steps = steps;
  req.guidance_scale = guidance_scale;
  req.guidance_scale_2 = guidance_scale_2;
  req.boundary_ratio = boundary_ratio;
  req.flow_shift = flow_shift;
  req.max_sequence_length = max_sequence_length;
  req.seed = seed;
  return req;
}

// The first frame of an image-to-video request as Omni hands it over: None, a file path (str),
// the bytes of an encoded image (PNG, JPEG, WebP), or (width, height, rgb) with rgb the 8-bit
// RGB bytes of a PIL image in mode "RGB". Copied out of the Python objects here, with the GIL,
// so that decoding and resizing can run without it.
struct FirstFrame {
  enum class Kind { kNone, kPath, kEncoded, kRgb } kind = Kind::kNone;
  std::string path_or_bytes;
  vision::RgbImage rgb;
};

FirstFrame first_frame(const nb::handle& image) {
  FirstFrame f;
  if (image.is_none()) return f;
  if (nb::isinstance<nb::str>(image)) {
    f.kind = FirstFrame::Kind::kPath;
    f.path_or_bytes = nb::cast<std::string>(image);
    return f;
  }
  if (nb::isinstance<nb::bytes>(image)) {
    const auto b = nb::borrow<nb::bytes>(image);
    f.kind = FirstFrame::Kind::kEncoded;
    f.path_or_bytes.assign(b.c_str(), b.size());
    return f;
  }
  if (nb::isinstance<nb::tuple>(image) && nb::len(image) == 3 &&
      nb::isinstance<nb::bytes>(image[2])) {
    int64_t w = 0, h = 0;
    if (nb::try_cast(image[0], w) && nb::try_cast(image[1], h)) {
      const auto px = nb::borrow<nb::bytes>(image[2]);
      if (w <= 0 || h <= 0 || w > (int64_t{1} << 20) || h > (int64_t{1} << 20) ||
          px.size() != static_cast<size_t>(w * h * 3)) {
        throw_status(invalid_argument("image: " + std::to_string(px.size()) +
                                      " bytes are not the 8-bit RGB pixels of a " +
                                      std::to_string(w) + "x" + std::to_string(h) + " image"));
      }
      f.kind = FirstFrame::Kind::kRgb;
      f.rgb.width = w, f.rgb.height = h;
      const auto* p = reinterpret_cast<const uint8_t*>(px.c_str());
      f.rgb.pixels.assign(p, p + px.size());
      return f;
    }
  }
  throw_status(invalid_argument(
      "image must be a file path, the bytes of an encoded image, or (width, height, RGB bytes)"));
}

// generate-video's --image into `req`: an image read from a file or bytes as diffusers'
// load_image reads it (EXIF orientation applied, alpha dropped: convert("RGB")), then resized
// to the video's size and scaled to [-1, 1] (vision::vae_image_input). Before the pipeline's
// checks, as in the command, so a bad image or size gets the command's message.
Status add_first_frame(const FirstFrame& f, diffusion::WanRequest* req) {
  if (f.kind == FirstFrame::Kind::kNone) return ok_status();
  vision::ImageReadOptions opts;
  opts.alpha = vision::AlphaMode::kDrop;
  vision::RgbImage decoded;
  if (f.kind == FirstFrame::Kind::kPath) {
    QS_ASSIGN_OR_RETURN(decoded, vision::read_image_file(f.path_or_bytes, opts));
  } else if (f.kind == FirstFrame::Kind::kEncoded) {
    QS_ASSIGN_OR_RETURN(decoded, vision::read_image_bytes(f.path_or_bytes, "image", opts));
  }
  const vision::RgbImage& image = f.kind == FirstFrame::Kind::kRgb ? f.rgb : decoded;
  QS_ASSIGN_OR_RETURN(req->image, vision::vae_image_input(image, req->width, req->height));
  return ok_status();
}

// What Omni turns into a video output: (width, height, frames, rgb8, rgb, latents). rgb8 is the
// bytes generate-video writes to its PNG frames, uint8 [frames, height, width, 3]; rgb the
// pipeline's float32 [frames, height, width, 3] in [0, 1] (diffusers' output_type="np", one
// video), only when asked for; latents the final latents float32 [z_dim, T, h, w] (diffusers'
// output_type="latent"). A run that did not decode has None for both videos.
nb::tuple video_arrays(diffusion::WanVideo out, const diffusion::WanPipeline::LatentShape& z,
                       bool want_rgb) {
  const auto f = static_cast<size_t>(out.frames), h = static_cast<size_t>(out.height),
             w = static_cast<size_t>(out.width);
  nb::object rgb8 = nb::none(), rgb = nb::none();
  if (!out.rgb.empty()) {
    rgb8 = nb::cast(owned_array(diffusion::to_rgb8(out.rgb), {f, h, w, 3}));
    if (want_rgb) rgb = nb::cast(owned_array(std::move(out.rgb), {f, h, w, 3}));
  }
  nb::object latents = nb::cast(owned_array(
      std::move(out.latents), {static_cast<size_t>(z.channels), static_cast<size_t>(z.frames),
                               static_cast<size_t>(z.height), static_cast<size_t>(z.width)}));
  return nb::make_tuple(out.width, out.height, out.frames, rgb8, rgb, latents);
}

nb::tuple generate_video(WanCore& core, diffusion::WanRequest req, const nb::handle& image,
                         const std::string& type) {
  const OutputType out_type = output_type(type);
  const FirstFrame frame = first_frame(image);
  InterruptPoll interrupted;
  req.cancelled = [&interrupted] { return interrupted(); };
  std::optional<Result<diffusion::WanVideo>> video;
  without_gil("generating a video (lower height, width or num_frames)", [&] {
    // The pipeline checks the request itself (WanPipeline::denoise validates first).
    Status s = add_first_frame(frame, &req);
    if (s.ok()) {
      video.emplace(core.generate(req, out_type.decode));
    } else {
      video.emplace(std::move(s));
    }
  });
  interrupted.raise_if_interrupted();  // the pipeline's "cancelled after step i/n" is ours
  return video_arrays(value_or_throw(std::move(*video)), core.pipeline().latent_shape(req),
                      out_type.float_rgb);
}

// A video's 8-bit frames from Python: a uint8 [n_frames, height, width, 3] buffer (numpy, or the
// memoryview WanCore.generate returns).
using Frames = nb::ndarray<const uint8_t, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

vision::VideoWriteOptions mp4_options(const Frames& frames, int fps, int crf) {
  if (frames.shape(3) != 3) {
    throw_status(invalid_argument(
        "frames must be uint8 [n_frames, height, width, 3], got [" +
        std::to_string(frames.shape(0)) + ", " + std::to_string(frames.shape(1)) + ", " +
        std::to_string(frames.shape(2)) + ", " + std::to_string(frames.shape(3)) + "]"));
  }
  vision::VideoWriteOptions options;  // generate-video's preset and threads
  options.fps = fps;
  options.crf = crf;
  return options;
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

  nb::class_<WanCore>(m, "WanCore")
      .def_static(
          "load",
          [](const std::string& model, const std::string& revision, int threads) {
            std::optional<Result<std::unique_ptr<WanCore>>> loaded;
            without_gil("loading the pipeline",
                        [&] { loaded.emplace(WanCore::load(model, revision, threads)); });
            return value_or_throw(std::move(*loaded));
          },
          "model"_a, "revision"_a, "threads"_a)
      // The checks generate() makes before its first step, with the image prepared as there.
      .def(
          "validate",
          [](const WanCore& core, const std::string& prompt, const std::string& negative_prompt,
             int64_t width, int64_t height, int64_t num_frames, int64_t steps,
             double guidance_scale, std::optional<double> guidance_scale_2,
             std::optional<double> boundary_ratio, std::optional<double> flow_shift,
             int64_t max_sequence_length, const nb::handle& image) {
            diffusion::WanRequest req = wan_request(
                prompt, negative_prompt, width, height, num_frames, steps, guidance_scale,
                guidance_scale_2, boundary_ratio, flow_shift, max_sequence_length, 0);
            const FirstFrame frame = first_frame(image);
            Status s;
            without_gil("preparing the image (lower height or width)", [&] {
              s = add_first_frame(frame, &req);
              if (s.ok()) s = core.pipeline().validate(req);
            });
            check_ok(s);
          },
          "prompt"_a, "negative_prompt"_a, "width"_a, "height"_a, "num_frames"_a, "steps"_a,
          "guidance_scale"_a, "guidance_scale_2"_a.none(), "boundary_ratio"_a.none(),
          "flow_shift"_a.none(), "max_sequence_length"_a, "image"_a.none() = nb::none())
      .def(
          "generate",
          [](WanCore& core, const std::string& prompt, const std::string& negative_prompt,
             int64_t width, int64_t height, int64_t num_frames, int64_t steps,
             double guidance_scale, std::optional<double> guidance_scale_2,
             std::optional<double> boundary_ratio, std::optional<double> flow_shift,
             int64_t max_sequence_length, uint64_t seed, const nb::handle& image,
             const std::string& output_type) {
            return generate_video(
                core,
                wan_request(prompt, negative_prompt, width, height, num_frames, steps,
                            guidance_scale, guidance_scale_2, boundary_ratio, flow_shift,
                            max_sequence_length, seed),
                image, output_type);
          },
          "prompt"_a, "negative_prompt"_a, "width"_a, "height"_a, "num_frames"_a, "steps"_a,
          "guidance_scale"_a, "guidance_scale_2"_a.none(), "boundary_ratio"_a.none(),
          "flow_shift"_a.none(), "max_sequence_length"_a, "seed"_a, "image"_a.none() = nb::none(),
          "output_type"_a = "pil")
      // Latents [z_dim, T, h, w] (as generate returns them) through the pipeline's VAE: the
      // same tuple generate returns for output_type "np".
      .def(
          "decode",
          [](WanCore& core, nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu> z,
             int64_t num_frames, int64_t height, int64_t width) {
            diffusion::WanPipeline::LatentShape shape;
            shape.channels = static_cast<int64_t>(z.shape(0));
            shape.frames = static_cast<int64_t>(z.shape(1));
            shape.height = static_cast<int64_t>(z.shape(2));
            shape.width = static_cast<int64_t>(z.shape(3));
            std::vector<float> latents(z.data(), z.data() + z.size());
            std::optional<Result<diffusion::WanVideo>> video;
            without_gil("decoding latents", [&] {
              video.emplace(core.decode(std::move(latents), num_frames, height, width));
            });
            return video_arrays(value_or_throw(std::move(*video)), shape, true);
          },
          "latents"_a, "num_frames"_a, "height"_a, "width"_a)
      // WanImageToVideoPipeline (I2V-A14B): every request needs an image.
      .def_prop_ro("needs_image",
                   [](const WanCore& core) { return core.pipeline().image_to_video(); })
      // I2V-A14B, or an expand_timesteps pipeline (TI2V-5B), which takes one optionally.
      .def_prop_ro("takes_image",
                   [](const WanCore& core) {
                     return core.pipeline().image_to_video() || core.pipeline().expand_timesteps();
                   })
      // generate-video's default --fps: the model's own rate (A14B 16, TI2V-5B 24).
      .def_prop_ro("default_fps",
                   [](const WanCore& core) { return core.pipeline().default_fps(); });

  // 8-bit RGB frames [n_frames, height, width, 3] as the MP4 generate-video writes (H.264,
  // yuv420p, BT.709-tagged: vision::encode_mp4 with the command's --crf and preset), as bytes;
  // write_mp4 writes them to a file as the command's --out does.
  m.def(
      "encode_mp4",
      [](const Frames& frames, int fps, int crf) {
        const vision::VideoWriteOptions options = mp4_options(frames, fps, crf);
        std::optional<Result<std::string>> mp4;
        without_gil("encoding the MP4", [&] {
          mp4.emplace(vision::encode_mp4(frames.data(), static_cast<int64_t>(frames.shape(0)),
                                         static_cast<int64_t>(frames.shape(1)),
                                         static_cast<int64_t>(frames.shape(2)), options));
        });
        const std::string bytes = value_or_throw(std::move(*mp4));
        return nb::bytes(bytes.data(), bytes.size());
      },
      "frames"_a, "fps"_a = 16, "crf"_a = 18);
  m.def(
      "write_mp4",
      [](const std::string& path, const Frames& frames, int fps, int crf) {
        const vision::VideoWriteOptions options = mp4_options(frames, fps, crf);
        Status s;
        without_gil("encoding the MP4", [&] {
          s = vision::write_mp4(path, frames.data(), static_cast<int64_t>(frames.shape(0)),
                                static_cast<int64_t>(frames.shape(1)),
                                static_cast<int64_t>(frames.shape(2)), options);
        });
        check_ok(s);
      },
      "path"_a, "frames"_a, "fps"_a = 16, "crf"_a = 18);

  // Which engine a pipeline directory needs (its registered family's key: "flux" or "wan"),
  // from its model_index.json; a class quantserve does not run is UnsupportedError with the
  // commands' message.
  m.def("pipeline_family", [](const std::string& dir) {
    const diffusion::PipelineIndex index = value_or_throw(diffusion::read_pipeline_index(dir));
    return std::string(index.family->key);
  });

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
