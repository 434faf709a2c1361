#include "diffusion/wan_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <utility>

#include "core/json.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"

namespace qs::diffusion {

namespace fs = std::filesystem;

namespace {

// Wan's real pipelines run 81 frames; a request beyond this many frames is refused before any
// memory is touched (the server's budget check comes after, for what is left).
constexpr int64_t kWanMaxFrames = 1024;
constexpr int64_t kWanMaxSide = 4096;
constexpr int64_t kWanMaxSteps = 1000;

std::string wan_num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Result<std::unique_ptr<WanPipeline>> WanPipeline::load(const std::string& dir) {
  QS_ASSIGN_OR_RETURN(PipelineIndex index, read_pipeline_index(dir));
  if (index.family != family_for_class("WanPipeline")) {
    return invalid_argument(dir + "/model_index.json: _class_name \"" + index.class_name +
                            "\" is a " + index.family->name + " pipeline, not a Wan one (" +
                            index.family->command + " runs it)");
  }
  std::unique_ptr<WanPipeline> p(new WanPipeline());
  p->class_name_ = index.class_name;
  p->image_to_video_ = index.class_name == "WanImageToVideoPipeline";
  p->expand_timesteps_ = index.flag("expand_timesteps");
  p->boundary_ratio_ = index.number("boundary_ratio");
  for (const char* required : {"text_encoder", "tokenizer", "vae", "scheduler"}) {
    if (!index.has(required)) {
      return invalid_argument(dir + "/model_index.json: the pipeline has no " +
                              std::string(required) + " (a Wan pipeline needs text_encoder, " +
                              "tokenizer, transformer, vae and scheduler)");
    }
  }
  if (index.has("image_encoder")) {
    return unimplemented(dir +
                         ": an image_encoder (Wan2.1 I2V's CLIP image conditioning) is not "
                         "supported; Wan2.2's I2V-A14B and TI2V-5B need none");
  }
  const fs::path d(dir);
  QS_ASSIGN_OR_RETURN(p->text_, WanTextEncoder::load(dir));
  for (const std::string& name : index.transformers()) {
    QS_ASSIGN_OR_RETURN(std::string tdir, index.component_dir(name));
    QS_ASSIGN_OR_RETURN(WanTransformer t, WanTransformer::load(tdir));
    (name == "transformer" ? p->transformer_ : p->transformer_2_) =
        std::make_unique<WanTransformer>(std::move(t));
  }
  if (!p->transformer_ && !p->transformer_2_) {
    return invalid_argument(dir + "/model_index.json: the pipeline has no transformer");
  }
  if (p->transformer_2_ && !p->boundary_ratio_) {
    return invalid_argument(dir +
                            ": transformer_2 is present but model_index.json sets no "
                            "boundary_ratio (which timesteps go to which expert)");
  }
  QS_ASSIGN_OR_RETURN(std::string vae_dir, index.component_dir("vae"));
  QS_ASSIGN_OR_RETURN(p->vae_, AutoencoderKLWan::load(vae_dir));
  // What the components map or repack: their weight files' bytes (16-bit weights are views of
  // the files, quantized ones repacked to about their size; f32 copies of biases and norms add
  // little).
  for (const char* name : {"text_encoder", "transformer", "transformer_2", "vae"}) {
    p->resident_bytes_ += component_weight_bytes((d / name).string());
  }
  QS_ASSIGN_OR_RETURN(p->scheduler_,
                      read_unipc_config((d / "scheduler" / "scheduler_config.json").string()));

  // Every expert must read and write the VAE's latents and the text encoder's width.
  const int64_t z = p->vae_.config().z_dim;
  for (const WanTransformer* t : {p->transformer_.get(), p->transformer_2_.get()}) {
    if (!t) continue;
    const WanTransformerConfig& c = t->config();
    const int64_t want_in =
        p->image_to_video_ && !p->expand_timesteps_ ? z + p->vae_.temporal_scale() + z : z;
    if (c.in_channels != want_in || c.out_channels != z) {
      return invalid_argument(
          dir + ": the transformer takes " + std::to_string(c.in_channels) + " and gives " +
          std::to_string(c.out_channels) + " channels, but the VAE's z_dim " + std::to_string(z) +
          (want_in != z ? " with the image condition needs " + std::to_string(want_in) + " in"
                        : " needs the same in and out"));
    }
    if (c.text_dim != p->text_.hidden_size()) {
      return invalid_argument(dir + ": the transformer's text_dim " + std::to_string(c.text_dim) +
                              " is not the text encoder's width " +
                              std::to_string(p->text_.hidden_size()));
    }
  }
  return p;
}

int64_t WanPipeline::spatial_multiple() const {
  const WanTransformer* t = transformer_ ? transformer_.get() : transformer_2_.get();
  const auto& patch = t->config().patch_size;
  return vae_.spatial_scale() * std::max(patch[1], patch[2]);
}

WanPipeline::LatentShape WanPipeline::latent_shape(const WanRequest& req) const {
  LatentShape s;
  s.channels = vae_.config().z_dim;
  s.frames = (req.num_frames - 1) / vae_.temporal_scale() + 1;
  s.height = req.height / vae_.spatial_scale();
  s.width = req.width / vae_.spatial_scale();
  return s;
}

Status WanPipeline::validate(const WanRequest& req) const {
  const int64_t m = spatial_multiple();
  if (req.width <= 0 || req.height <= 0 || req.width > kWanMaxSide || req.height > kWanMaxSide) {
    return invalid_argument("size " + std::to_string(req.width) + "x" + std::to_string(req.height) +
                            " is out of range (1.." + std::to_string(kWanMaxSide) + " a side)");
  }
  if (req.width % m != 0 || req.height % m != 0) {
    return invalid_argument("width and height must be multiples of " + std::to_string(m) +
                            " (the VAE's " + std::to_string(vae_.spatial_scale()) +
                            "x times the transformer's patch); got " + std::to_string(req.width) +
                            "x" + std::to_string(req.height));
  }
  const int64_t ts = vae_.temporal_scale();
  if (req.num_frames < 1 || req.num_frames > kWanMaxFrames) {
    return invalid_argument("num_frames " + std::to_string(req.num_frames) +
                            " is out of range (1.." + std::to_string(kWanMaxFrames) + ")");
  }
  if ((req.num_frames - 1) % ts != 0) {
    const int64_t lo = (req.num_frames - 1) / ts * ts + 1;
    return invalid_argument("num_frames must be " + std::to_string(ts) + "k + 1 (the VAE keeps " +
                            "the first frame and compresses the rest " + std::to_string(ts) +
                            "x): " + std::to_string(req.num_frames) + " is not; try " +
                            std::to_string(lo) + " or " + std::to_string(lo + ts));
  }
  if (req.steps < 1 || req.steps > kWanMaxSteps) {
    return invalid_argument("num_inference_steps " + std::to_string(req.steps) +
                            " is out of range (1.." + std::to_string(kWanMaxSteps) + ")");
  }
  for (double g : {req.guidance_scale, req.guidance_scale_2.value_or(0.0)}) {
    if (!std::isfinite(g) || g < 0) return invalid_argument("guidance scales must be finite, >= 0");
  }
  if (req.guidance_scale_2 && !transformer_2_) {
    return invalid_argument(
        "guidance_scale_2 applies to a two-expert pipeline (A14B); this one "
        "has no transformer_2");
  }
  if (req.boundary_ratio) {
    if (!transformer_2_) {
      return invalid_argument(
          "boundary_ratio applies to a two-expert pipeline (A14B); this one "
          "has no transformer_2");
    }
    if (!(*req.boundary_ratio >= 0 && *req.boundary_ratio <= 1)) {
      return invalid_argument("boundary_ratio must be in [0, 1], got " +
                              wan_num(*req.boundary_ratio));
    }
  }
  if (req.flow_shift && !(std::isfinite(*req.flow_shift) && *req.flow_shift > 0)) {
    return invalid_argument("flow_shift must be > 0");
  }
  if (req.max_sequence_length < 1 || req.max_sequence_length > 4096) {
    return invalid_argument("max_sequence_length " + std::to_string(req.max_sequence_length) +
                            " is out of range (1..4096)");
  }
  const LatentShape s = latent_shape(req);
  if (!req.noise.empty() && static_cast<int64_t>(req.noise.size()) != s.numel()) {
    return invalid_argument("noise holds " + std::to_string(req.noise.size()) + " values; a " +
                            std::to_string(req.width) + "x" + std::to_string(req.height) + "x" +
                            std::to_string(req.num_frames) + " video needs " +
                            std::to_string(s.numel()) + " ([" + std::to_string(s.channels) + ", " +
                            std::to_string(s.frames) + ", " + std::to_string(s.height) + ", " +
                            std::to_string(s.width) + "])");
  }
  if (image_to_video_ && req.image.empty()) {
    return invalid_argument("this is an image-to-video pipeline (" + class_name_ +
                            "): the request needs an image");
  }
  if (!req.image.empty()) {
    if (!image_to_video_ && !expand_timesteps_) {
      return invalid_argument(
          "this text-to-video pipeline takes no image (image to video needs "
          "an I2V or TI2V pipeline)");
    }
    if (static_cast<int64_t>(req.image.size()) != 3 * req.width * req.height) {
      return invalid_argument("the image holds " + std::to_string(req.image.size()) +
                              " values; a " + std::to_string(req.width) + "x" +
                              std::to_string(req.height) + " video needs 3 x " +
                              std::to_string(req.width * req.height));
    }
  }
  return ok_status();
}

Result<std::vector<float>> WanPipeline::image_condition(const WanRequest& req,
                                                        ThreadPool& pool) const {
  const LatentShape s = latent_shape(req);
  const int64_t plane = req.height * req.width;
  // TI2V encodes the image alone (one frame); A14B the image followed by black frames.
  const int64_t f = expand_timesteps_ ? 1 : req.num_frames;
  std::vector<float> video(static_cast<size_t>(3 * f * plane), 0.0f);
  for (int64_t c = 0; c < 3; ++c) {
    std::copy_n(req.image.data() + c * plane, plane, video.data() + c * f * plane);
  }
  QS_ASSIGN_OR_RETURN(std::vector<float> latent,
                      vae_.encode_mean(video.data(), f, req.height, req.width, pool));
  const int64_t t = expand_timesteps_ ? 1 : s.frames;
  wan_normalize(vae_.config(), latent.data(), t, s.height, s.width);
  if (expand_timesteps_) return latent;
  // A14B: 4 mask channels (1 on the first latent frame, whose 4 pixel frames hold the image,
  // 0 after) before the latents.
  const int64_t ts = vae_.temporal_scale();
  const int64_t lplane = s.height * s.width;
  std::vector<float> cond(static_cast<size_t>((ts + s.channels) * s.frames * lplane), 0.0f);
  for (int64_t c = 0; c < ts; ++c) {
    std::fill_n(cond.data() + c * s.frames * lplane, lplane, 1.0f);
  }
  std::copy(latent.begin(), latent.end(), cond.begin() + ts * s.frames * lplane);
  return cond;
}

Result<std::vector<float>> WanPipeline::denoise(const WanRequest& req, ThreadPool& pool,
                                                std::vector<double>* step_seconds) const {
  QS_RETURN_IF_ERROR(validate(req));
  using clock = std::chrono::steady_clock;
  const LatentShape s = latent_shape(req);
  const int64_t n = s.numel();
  const bool cfg = req.guidance_scale > 1.0;
  const int64_t batch = cfg ? 2 : 1;

  // Prompt embeddings, the conditional branch first: [batch, L, text_dim].
  QS_ASSIGN_OR_RETURN(std::vector<float> text,
                      text_.encode(req.prompt, req.max_sequence_length, pool));
  if (cfg) {
    QS_ASSIGN_OR_RETURN(std::vector<float> neg,
                        text_.encode(req.negative_prompt, req.max_sequence_length, pool));
    text.insert(text.end(), neg.begin(), neg.end());
  }

  UniPCConfig sched_config = scheduler_;
  if (req.flow_shift) sched_config.flow_shift = *req.flow_shift;
  UniPCScheduler sched(sched_config);
  QS_RETURN_IF_ERROR(sched.set_timesteps(req.steps));

  std::vector<float> latents = req.noise;
  if (latents.empty()) {
    std::mt19937_64 rng(req.seed);
    std::normal_distribution<float> normal;
    latents.resize(static_cast<size_t>(n));
    for (float& v : latents) v = normal(rng);
  }
  std::vector<float> condition;
  if (!req.image.empty()) {
    QS_ASSIGN_OR_RETURN(condition, image_condition(req, pool));
  }
  const bool image_first_frame = expand_timesteps_ && !condition.empty();
  const int64_t lplane = s.height * s.width;

  const std::optional<double> ratio = req.boundary_ratio ? req.boundary_ratio : boundary_ratio_;
  const double boundary =
      ratio ? *ratio * static_cast<double>(sched_config.num_train_timesteps) : -1.0;

  const WanTransformer* any = transformer_ ? transformer_.get() : transformer_2_.get();
  const int64_t c_in = any->config().in_channels;
  const auto& patch = any->config().patch_size;
  const int64_t seq = s.frames * (s.height / patch[1]) * (s.width / patch[2]);
  const int64_t tokens_per_frame = seq / s.frames;
  std::vector<float> input(static_cast<size_t>(batch * c_in * s.frames * lplane));
  std::vector<float> out(static_cast<size_t>(batch * n));
  std::vector<float> tstep(static_cast<size_t>(expand_timesteps_ ? batch * seq : batch));
  std::vector<float> pred(static_cast<size_t>(n));

  for (int64_t i = 0; i < req.steps; ++i) {
    const auto t0 = clock::now();
    // An int64 in diffusers: compared with the boundary as is, a float to the transformer.
    const double t = static_cast<double>(sched.timesteps()[static_cast<size_t>(i)]);
    const bool high = boundary < 0 || t >= boundary;
    const WanTransformer* model = high ? transformer_.get() : transformer_2_.get();
    if (!model) {
      return invalid_argument(std::string("step ") + std::to_string(i) + " (t = " + wan_num(t) +
                              ") needs " + (high ? "transformer" : "transformer_2") +
                              ", which the pipeline lacks");
    }
    const double g = high ? req.guidance_scale : req.guidance_scale_2.value_or(req.guidance_scale);

    // The transformer's input for one branch, copied to each branch of the batch.
    float* in0 = input.data();
    if (image_first_frame) {
      std::copy(latents.begin(), latents.end(), in0);
      for (int64_t c = 0; c < s.channels; ++c) {
        std::copy_n(condition.data() + c * lplane, lplane, in0 + c * s.frames * lplane);
      }
    } else if (!condition.empty()) {
      std::copy(latents.begin(), latents.end(), in0);
      std::copy(condition.begin(), condition.end(), in0 + n);
    } else {
      std::copy(latents.begin(), latents.end(), in0);
    }
    const int64_t per_branch = c_in * s.frames * lplane;
    for (int64_t b = 1; b < batch; ++b) std::copy_n(in0, per_branch, in0 + b * per_branch);
    // The timestep as diffusers passes it: t as a float (its int64 tensor converted by the
    // time projection), per token under expand_timesteps with the image frame's tokens at 0.
    const float tf = static_cast<float>(t);
    if (expand_timesteps_) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t k = 0; k < seq; ++k) {
          tstep[static_cast<size_t>(b * seq + k)] =
              image_first_frame && k < tokens_per_frame ? 0.0f : tf;
        }
      }
    } else {
      std::fill(tstep.begin(), tstep.end(), tf);
    }
    WanInputs in;
    in.batch = batch;
    in.frames = s.frames;
    in.height = s.height;
    in.width = s.width;
    in.latents = input.data();
    in.timestep = tstep.data();
    in.per_token_timestep = expand_timesteps_;
    in.n_text = req.max_sequence_length;
    in.text = text.data();
    QS_RETURN_IF_ERROR(model->forward(in, out.data(), pool));
    if (cfg) {
      // noise_uncond + g * (noise_pred - noise_uncond), in f32 as torch computes it.
      const float gf = static_cast<float>(g);
      for (int64_t k = 0; k < n; ++k) {
        const float uncond = out[static_cast<size_t>(n + k)];
        pred[static_cast<size_t>(k)] = uncond + gf * (out[static_cast<size_t>(k)] - uncond);
      }
    } else {
      std::copy_n(out.data(), n, pred.data());
    }
    QS_RETURN_IF_ERROR(sched.step(pred.data(), latents.data(), n));
    if (step_seconds) {
      step_seconds->push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    if (req.on_step) req.on_step(i, req.steps, latents);
    if (req.cancelled && req.cancelled() && i + 1 < req.steps) {
      return Status(StatusCode::kInternal, "cancelled after step " + std::to_string(i + 1) + "/" +
                                               std::to_string(req.steps));
    }
  }
  if (image_first_frame) {
    for (int64_t c = 0; c < s.channels; ++c) {
      std::copy_n(condition.data() + c * lplane, lplane, latents.data() + c * s.frames * lplane);
    }
  }
  return latents;
}

Result<WanVideo> WanPipeline::decode(std::vector<float> latents, int64_t frames, int64_t height,
                                     int64_t width, ThreadPool& pool) const {
  const int64_t t = (frames - 1) / vae_.temporal_scale() + 1;
  const int64_t h = height / vae_.spatial_scale(), w = width / vae_.spatial_scale();
  const int64_t z = vae_.config().z_dim;
  if (static_cast<int64_t>(latents.size()) != z * t * h * w) {
    return invalid_argument("latents hold " + std::to_string(latents.size()) + " values, not [" +
                            std::to_string(z) + ", " + std::to_string(t) + ", " +
                            std::to_string(h) + ", " + std::to_string(w) + "]");
  }
  WanVideo v;
  v.latents = latents;
  wan_denormalize(vae_.config(), latents.data(), t, h, w);
  QS_ASSIGN_OR_RETURN(std::vector<float> video, vae_.decode(latents.data(), z, t, h, w, pool));
  // VideoProcessor.postprocess_video: (x / 2 + 0.5).clamp(0, 1), channels last.
  const int64_t plane = height * width;
  if (static_cast<int64_t>(video.size()) != 3 * frames * plane) {
    return internal_error("the VAE decoded " + std::to_string(video.size()) +
                          " values for a video of " + std::to_string(3 * frames * plane));
  }
  v.width = width;
  v.height = height;
  v.frames = frames;
  v.rgb.resize(video.size());
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t f = 0; f < frames; ++f) {
      const float* src = video.data() + (c * frames + f) * plane;
      float* dst = v.rgb.data() + f * plane * 3 + c;
      for (int64_t p = 0; p < plane; ++p) {
        dst[p * 3] = std::clamp(src[p] / 2.0f + 0.5f, 0.0f, 1.0f);
      }
    }
  }
  return v;
}

size_t WanPipeline::request_peak_bytes(const WanRequest& req, int threads) const {
  const LatentShape s = latent_shape(req);
  const size_t f32 = sizeof(float);
  const bool cfg = req.guidance_scale > 1.0;
  const int64_t batch = cfg ? 2 : 1;
  const WanTransformer* any = transformer_ ? transformer_.get() : transformer_2_.get();
  const WanTransformerConfig& tc = any->config();
  const int64_t seq = s.frames * (s.height / tc.patch_size[1]) * (s.width / tc.patch_size[2]);
  const size_t n = static_cast<size_t>(s.numel());
  // The loop: text embeddings of both branches, latents, the condition (at most 4 + z channels),
  // the transformer's input and output of the batch, the guided prediction, UniPC's history
  // (solver_order x0 predictions and the last sample), one forward's activations.
  const size_t text = static_cast<size_t>(batch * req.max_sequence_length * tc.text_dim) * f32;
  const size_t loop =
      text +
      n * f32 *
          (1 + 2 + static_cast<size_t>(batch) * 2 + 1 +
           static_cast<size_t>(scheduler_.solver_order) + 1) +
      wan_transformer_activation_bytes(tc, batch, seq, req.max_sequence_length, threads);
  // The image condition's encode runs before the loop on the image (TI2V) or on the whole
  // video of black frames after it (A14B); sized like a decode of the same grid, plus its input.
  size_t encode = 0;
  if (!req.image.empty()) {
    const int64_t f = expand_timesteps_ ? 1 : req.num_frames;
    const int64_t t = expand_timesteps_ ? 1 : s.frames;
    encode = static_cast<size_t>(3 * f * req.height * req.width) * f32 +
             wan_vae_decode_peak_bytes(vae_.config(), t, s.height, s.width, threads);
  }
  // The decode: the latents, the VAE's peak (its output included), the frames in [0, 1] and as
  // 8-bit, and the MP4 (well under the 8-bit frames).
  const size_t frames = static_cast<size_t>(req.num_frames * req.height * req.width * 3);
  const size_t decode =
      n * f32 * 2 + wan_vae_decode_peak_bytes(vae_.config(), s.frames, s.height, s.width, threads) +
      frames * f32 + frames * 2;
  return std::max({loop, encode, decode});
}

size_t WanPipeline::resident_bytes() const {
  return resident_bytes_;
}

Result<WanVideo> WanPipeline::generate(const WanRequest& req, ThreadPool& pool) const {
  std::vector<double> seconds;
  QS_ASSIGN_OR_RETURN(std::vector<float> latents, denoise(req, pool, &seconds));
  QS_ASSIGN_OR_RETURN(WanVideo v,
                      decode(std::move(latents), req.num_frames, req.height, req.width, pool));
  v.step_seconds = std::move(seconds);
  return v;
}

// ---- DiffusionPipeline ----

const PipelineFamilySpec& WanPipeline::family() const {
  return *family_for_class("WanPipeline");
}

DiffusionRequest WanPipeline::resolve(DiffusionRequest req) const {
  const WanRequest defaults;
  if (!req.width) req.width = defaults.width;
  if (!req.height) req.height = defaults.height;
  if (!req.num_frames) req.num_frames = defaults.num_frames;
  if (!req.num_inference_steps) req.num_inference_steps = defaults.steps;
  if (!req.guidance_scale) req.guidance_scale = defaults.guidance_scale;
  if (!req.max_sequence_length) req.max_sequence_length = defaults.max_sequence_length;
  return req;
}

WanRequest WanPipeline::wan_request(const DiffusionRequest& req) const {
  WanRequest r;
  r.prompt = req.prompt;
  r.negative_prompt = req.negative_prompt;
  // Unresolved fields (a caller that skipped resolve) are 0, which validate refuses.
  r.width = req.width.value_or(0), r.height = req.height.value_or(0);
  r.num_frames = req.num_frames.value_or(0);
  r.steps = req.num_inference_steps.value_or(0);
  r.guidance_scale = req.guidance_scale.value_or(r.guidance_scale);
  r.guidance_scale_2 = req.guidance_scale_2;
  r.boundary_ratio = req.boundary_ratio;
  r.flow_shift = req.flow_shift;
  r.max_sequence_length = req.max_sequence_length.value_or(0);
  r.seed = req.seed;
  r.noise = req.latents;
  r.image = req.image;
  r.on_step = req.on_step;
  r.cancelled = req.cancelled;
  return r;
}

Status WanPipeline::validate(const DiffusionRequest& req) const {
  if (req.true_cfg_scale) {
    return refuse_field(family(), "true_cfg_scale", "guidance_scale is their CFG scale");
  }
  return validate(wan_request(req));
}

std::vector<int64_t> WanPipeline::latents_shape(const DiffusionRequest& req) const {
  const WanRequest r = wan_request(req);
  if (r.width <= 0 || r.height <= 0 || r.num_frames <= 0) return {};
  const LatentShape s = latent_shape(r);
  return {s.channels, s.frames, s.height, s.width};
}

size_t WanPipeline::request_peak_bytes(const DiffusionRequest& req, int threads) const {
  return request_peak_bytes(wan_request(req), threads);
}

Result<std::vector<float>> WanPipeline::denoise(const DiffusionRequest& req, ThreadPool& pool,
                                                DiffusionOutput* times) const {
  QS_RETURN_IF_ERROR(validate(req));
  return denoise(wan_request(req), pool, times ? &times->step_seconds : nullptr);
}

Result<DiffusionOutput> WanPipeline::decode(std::vector<float> latents, const DiffusionRequest& req,
                                            ThreadPool& pool) const {
  QS_ASSIGN_OR_RETURN(WanVideo v, decode(std::move(latents), req.num_frames.value_or(0),
                                         req.height.value_or(0), req.width.value_or(0), pool));
  DiffusionOutput out;
  out.width = v.width, out.height = v.height, out.frames = v.frames;
  out.rgb = std::move(v.rgb);
  out.latents = std::move(v.latents);
  return out;
}

Result<std::unique_ptr<DiffusionPipeline>> load_wan_pipeline(const PipelineIndex& index,
                                                             const PipelineLoadOptions& options) {
  if (!options.tiny_vae.empty()) {
    return invalid_argument("a tiny autoencoder (--vae-decoder tiny) decodes FLUX latents; " +
                            index.dir + " is a Wan2.2 pipeline");
  }
  QS_ASSIGN_OR_RETURN(std::unique_ptr<WanPipeline> p, WanPipeline::load(index.dir));
  return std::unique_ptr<DiffusionPipeline>(std::move(p));
}

}  // namespace qs::diffusion
