// diffusion: the FLUX.1 text-to-image loop (see flux_pipeline.h), step for step as
// FluxPipeline.__call__, with its branches batched in one forward or split over a CFG-parallel
// pair of ranks.
#include "diffusion/flux_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/json.h"
#include "diffusion/flux_cfg_parallel.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"
#include "io/checkpoint.h"

namespace qs::diffusion {

namespace fs = std::filesystem;

namespace {

// CLIPTokenizer's model_max_length in every FLUX checkpoint.
constexpr int64_t kClipTokens = 77;
// FluxPipeline.default_sample_size: the latent side of the default image.
constexpr int64_t kDefaultSampleSize = 128;

}  // namespace

std::vector<float> flux_image_ids(int64_t h2, int64_t w2) {
  std::vector<float> ids(static_cast<size_t>(h2 * w2 * 3), 0.0f);
  for (int64_t r = 0; r < h2; ++r) {
    for (int64_t c = 0; c < w2; ++c) {
      ids[(r * w2 + c) * 3 + 1] = static_cast<float>(r);
      ids[(r * w2 + c) * 3 + 2] = static_cast<float>(c);
    }
  }
  return ids;
}

namespace {

// The decoder .pth of a tiny autoencoder folder (taef2_decoder.pth, taesd_decoder.pth, ...).
Result<std::string> tiny_decoder_file(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with("_decoder.pth")) found.push_back(e.path().string());
  }
  if (ec) return not_found("--tiny-vae " + dir + ": " + ec.message());
  if (found.size() != 1) {
    return not_found("--tiny-vae " + dir +
                     ": expected one <name>_decoder.pth (TAESD family), found " +
                     std::to_string(found.size()));
  }
  return found[0];
}

}  // namespace

Result<std::unique_ptr<FluxPipeline>> FluxPipeline::load(const std::string& dir,
                                                         const FluxLoadOptions& options) {
  QS_ASSIGN_OR_RETURN(PipelineIndex index, read_pipeline_index(dir));
  if (index.family != family_for_class("FluxPipeline")) {
    return invalid_argument(dir + "/model_index.json: _class_name \"" + index.class_name +
                            "\" is a " + index.family->name + " pipeline, not FluxPipeline (" +
                            index.family->command + " runs it)");
  }
  std::unique_ptr<FluxPipeline> p(new FluxPipeline());
  p->class_name_ = index.class_name;
  const fs::path d(dir);
  QS_ASSIGN_OR_RETURN(p->clip_tok_, tok::ClipTokenizer::load((d / "tokenizer").string()));
  QS_ASSIGN_OR_RETURN(p->t5_tok_, tok::UnigramTokenizer::load((d / "tokenizer_2").string()));
  QS_ASSIGN_OR_RETURN(p->clip_, ClipTextModel::load((d / "text_encoder").string()));
  QS_ASSIGN_OR_RETURN(p->t5_, T5Encoder::load((d / "text_encoder_2").string()));
  QS_ASSIGN_OR_RETURN(p->transformer_, FluxTransformer::load((d / "transformer").string()));
  {
    QS_ASSIGN_OR_RETURN(models::Component vae_config,
                        models::Component::open_config((d / "vae").string()));
    QS_ASSIGN_OR_RETURN(p->vae_config_, read_vae_config(vae_config));
  }
  // The decoder's weights count as resident: the tiny one's file, or vae/'s.
  if (options.tiny_vae.empty()) {
    QS_ASSIGN_OR_RETURN(p->vae_, AutoencoderKL::load((d / "vae").string()));
    p->resident_bytes_ += component_weight_bytes((d / "vae").string());
  } else {
    QS_ASSIGN_OR_RETURN(std::string decoder, tiny_decoder_file(options.tiny_vae));
    QS_ASSIGN_OR_RETURN(TinyAutoencoder tiny, TinyAutoencoder::load("", decoder));
    p->tiny_ = std::make_unique<TinyAutoencoder>(std::move(tiny));
    std::error_code ec;
    p->resident_bytes_ += fs::file_size(decoder, ec);
  }
  QS_ASSIGN_OR_RETURN(p->scheduler_,
                      read_flow_match_config((d / "scheduler" / "scheduler_config.json").string()));
  for (const char* name : {"text_encoder", "text_encoder_2", "transformer"}) {
    p->resident_bytes_ += component_weight_bytes((d / name).string());
  }
  const FluxConfig& f = p->transformer_.config();
  if (f.in_channels != 4 * p->vae_config_.latent_channels || f.out_channels != f.in_channels) {
    return invalid_argument(dir + ": transformer in_channels " + std::to_string(f.in_channels) +
                            " is not 4 x the VAE's latent_channels " +
                            std::to_string(p->vae_config_.latent_channels));
  }
  if (p->tiny_ && (p->tiny_->latent_channels() != p->vae_config_.latent_channels ||
                   p->vae_config_.scale() != TinyAutoencoder::kScale)) {
    return invalid_argument("--tiny-vae " + options.tiny_vae + " decodes " +
                            std::to_string(p->tiny_->latent_channels()) + "-channel latents at " +
                            std::to_string(TinyAutoencoder::kScale) + "x, but " + dir + " makes " +
                            std::to_string(p->vae_config_.latent_channels) +
                            "-channel latents at " + std::to_string(p->vae_config_.scale()) +
                            "x (FLUX.1's 16 channels need TAEF1; TAEF2 is FLUX.2's 32)");
  }
  if (f.pooled_projection_dim != p->clip_.config().hidden_size ||
      f.joint_attention_dim != p->t5_.config().d_model) {
    return invalid_argument(dir +
                            ": the transformer's pooled/joint dims do not match the CLIP "
                            "hidden size and the T5 d_model");
  }
  return p;
}

Result<FluxPipeline::Prompt> FluxPipeline::encode_prompt(const std::string& text,
                                                         int64_t max_sequence_length,
                                                         ThreadPool& pool) const {
  Prompt p;
  const std::vector<int32_t> clip_ids = clip_tok_->encode_padded(text, kClipTokens);
  QS_RETURN_IF_ERROR(clip_.forward(clip_ids, nullptr, &p.pooled, pool));
  QS_ASSIGN_OR_RETURN(std::vector<int32_t> t5_ids,
                      t5_tok_->encode_padded(text, max_sequence_length));
  QS_RETURN_IF_ERROR(t5_.forward(t5_ids, &p.hidden, pool));
  return p;
}

Status FluxPipeline::latent_shape(const FluxRequest& req, int64_t* n_img, int64_t* channels) const {
  const int64_t unit = vae_config_.scale() * 2;
  if (req.width <= 0 || req.height <= 0 || req.width % unit != 0 || req.height % unit != 0 ||
      req.width > 4096 || req.height > 4096) {
    return invalid_argument("width and height must be positive multiples of " +
                            std::to_string(unit) + " up to 4096 (got " + std::to_string(req.width) +
                            "x" + std::to_string(req.height) + ")");
  }
  *n_img = (req.height / unit) * (req.width / unit);
  *channels = transformer_.config().in_channels;
  return ok_status();
}

int64_t FluxPipeline::default_size() const {
  return kDefaultSampleSize * vae_config_.scale();
}

Status FluxPipeline::validate(const FluxRequest& req) const {
  if (req.steps <= 0 || req.steps > 1000) return invalid_argument("steps must be 1 to 1000");
  if (req.max_sequence_length <= 0 || req.max_sequence_length > 512) {
    return invalid_argument("max_sequence_length must be 1 to 512");
  }
  if (!(req.true_cfg_scale >= 0) || !std::isfinite(req.true_cfg_scale) ||
      !std::isfinite(req.guidance_scale)) {
    return invalid_argument("guidance_scale / true_cfg_scale must be finite, true_cfg >= 0");
  }
  int64_t n_img = 0, ch = 0;
  return latent_shape(req, &n_img, &ch);
}

Result<FluxImage> FluxPipeline::generate(const FluxRequest& req, ThreadPool& pool) const {
  FluxStepTimes times;
  QS_ASSIGN_OR_RETURN(std::vector<float> latents, denoise_timed(req, pool, &times));
  QS_ASSIGN_OR_RETURN(FluxImage image, decode(std::move(latents), req.width, req.height, pool));
  image.times = std::move(times);
  return image;
}

Result<std::vector<float>> FluxPipeline::denoise(const FluxRequest& req, ThreadPool& pool) const {
  return denoise_timed(req, pool, nullptr);
}

Result<std::vector<float>> FluxPipeline::denoise_timed(const FluxRequest& req, ThreadPool& pool,
                                                       FluxStepTimes* times) const {
  QS_RETURN_IF_ERROR(validate(req));
  const bool true_cfg = req.true_cfg_scale > 1.0 && !req.negative_prompt.empty();
  if (!true_cfg) return denoise_branches(req, Branches::kPositive, pool, times);
  if (!cfg_group_) return denoise_branches(req, Branches::kBatched, pool, times);
  if (cfg_group_->rank() != 0) {
    return internal_error("rank 1 of a CFG-parallel group runs run_cfg_worker(), not generate()");
  }
  QS_RETURN_IF_ERROR(cfg_group_->health());
  std::vector<uint8_t> job = encode_cfg_job(req);
  cfg_group_->set_timeout(cfg_peer_timeout(0.0));
  Status sent = cfg_group_->broadcast_bytes(&job, 0);
  Result<std::vector<float>> latents = sent.ok()
                                           ? denoise_branches(req, Branches::kCfgRank0, pool, times)
                                           : Result<std::vector<float>>(sent);
  if (!latents.ok() && !cfg_group_->health().ok() && cfg_on_broken_)
    cfg_on_broken_(cfg_group_->health());
  return latents;
}

Result<std::vector<float>> FluxPipeline::denoise_branches(const FluxRequest& req, Branches branches,
                                                          ThreadPool& pool,
                                                          FluxStepTimes* times) const {
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  const bool pair = branches == Branches::kCfgRank0 || branches == Branches::kCfgRank1;
  const bool cfg = branches != Branches::kPositive;
  const int64_t B = branches == Branches::kBatched ? 2 : 1, T = req.max_sequence_length;
  const FluxConfig& f = transformer_.config();
  int64_t n_img = 0, ch = 0;
  std::vector<float> txt, pooled, latents;
  // Each rank of a pair encodes only its own prompt; both draw the same noise. A rank that fails
  // here still meets its peer in cfg_agree, so that neither waits for the other's first step.
  const auto t_prepare = clock::now();
  Status prepared = [&]() -> Status {
    QS_RETURN_IF_ERROR(validate(req));
    QS_RETURN_IF_ERROR(latent_shape(req, &n_img, &ch));
    if (branches != Branches::kCfgRank1) {
      QS_ASSIGN_OR_RETURN(Prompt pos, encode_prompt(req.prompt, T, pool));
      txt = std::move(pos.hidden), pooled = std::move(pos.pooled);
    }
    if (branches == Branches::kBatched || branches == Branches::kCfgRank1) {
      QS_ASSIGN_OR_RETURN(Prompt neg, encode_prompt(req.negative_prompt, T, pool));
      txt.insert(txt.end(), neg.hidden.begin(), neg.hidden.end());
      pooled.insert(pooled.end(), neg.pooled.begin(), neg.pooled.end());
    }
    latents = req.noise;
    if (latents.empty()) {
      std::mt19937_64 rng(req.seed);
      std::normal_distribution<float> normal;
      latents.resize(static_cast<size_t>(n_img * ch));
      for (float& v : latents) v = normal(rng);
    } else if (static_cast<int64_t>(latents.size()) != n_img * ch) {
      return invalid_argument("the initial noise holds " + std::to_string(latents.size()) +
                              " values; " + std::to_string(req.width) + "x" +
                              std::to_string(req.height) + " needs [" + std::to_string(n_img) +
                              ", " + std::to_string(ch) + "]");
    }
    return ok_status();
  }();
  if (pair) prepared = cfg_agree(*cfg_group_, prepared, seconds_since(t_prepare));
  QS_RETURN_IF_ERROR(prepared);

  const int64_t unit = vae_config_.scale() * 2, h2 = req.height / unit, w2 = req.width / unit;
  const std::vector<float> img_ids = flux_image_ids(h2, w2);
  const std::vector<float> txt_ids(static_cast<size_t>(T * 3), 0.0f);
  const FlowMatchSchedule sched = flux_schedule(scheduler_, req.steps, flux_mu(scheduler_, n_img));

  std::vector<float> x(static_cast<size_t>(B * n_img * ch)), v(x.size()), both;
  std::vector<float> ts(B), gs(B, static_cast<float>(req.guidance_scale));
  for (int64_t i = 0; i < req.steps; ++i) {
    const auto t_step = clock::now();
    // Both branches see the same latents; the batch shares every weight read.
    for (int64_t b = 0; b < B; ++b)
      std::copy(latents.begin(), latents.end(), x.begin() + b * n_img * ch);
    std::fill(ts.begin(), ts.end(), sched.timesteps[i] / 1000.0f);
    FluxInputs in{B,
                  n_img,
                  T,
                  x.data(),
                  txt.data(),
                  pooled.data(),
                  ts.data(),
                  f.guidance_embeds ? gs.data() : nullptr,
                  img_ids.data(),
                  txt_ids.data()};
    QS_RETURN_IF_ERROR(transformer_.forward(in, v.data(), pool));
    const double forward_s = seconds_since(t_step);
    double exchange_s = 0;
    // [positive; negative] predictions, from one forward or from both ranks.
    float* pred = v.data();
    if (pair) {
      const auto t0 = clock::now();
      QS_RETURN_IF_ERROR(cfg_exchange_predictions(*cfg_group_, v, &both, forward_s));
      exchange_s += seconds_since(t0);
      pred = both.data();
    }
    if (cfg) {
      // noise_pred = neg + scale * (pos - neg)
      const float s = static_cast<float>(req.true_cfg_scale);
      for (int64_t j = 0; j < n_img * ch; ++j) {
        const float neg = pred[n_img * ch + j];
        pred[j] = neg + s * (pred[j] - neg);
      }
    }
    flow_match_step(sched, i, pred, n_img * ch, latents.data());
    bool stop = false;
    if (branches != Branches::kCfgRank1) {
      if (req.on_step) req.on_step(i, req.steps, latents);
      stop = req.cancelled && req.cancelled();
    }
    if (pair) {
      const auto t0 = clock::now();
      QS_RETURN_IF_ERROR(cfg_exchange_stop(*cfg_group_, &stop, forward_s));
      exchange_s += seconds_since(t0);
    }
    if (times) {
      times->step_seconds.push_back(seconds_since(t_step));
      if (pair) times->exchange_seconds.push_back(exchange_s);
    }
    if (stop) {
      return Status(StatusCode::kInternal, "cancelled after step " + std::to_string(i + 1) + "/" +
                                               std::to_string(req.steps));
    }
  }
  return latents;
}

Result<FluxImage> FluxPipeline::decode(std::vector<float> latents, int64_t width, int64_t height,
                                       ThreadPool& pool) const {
  FluxRequest size;
  size.width = width, size.height = height;
  int64_t n_img = 0, ch = 0;
  QS_RETURN_IF_ERROR(latent_shape(size, &n_img, &ch));
  if (static_cast<int64_t>(latents.size()) != n_img * ch) {
    return invalid_argument("the latents hold " + std::to_string(latents.size()) + " values; " +
                            std::to_string(width) + "x" + std::to_string(height) + " needs [" +
                            std::to_string(n_img) + ", " + std::to_string(ch) + "]");
  }
  const int64_t unit = vae_config_.scale() * 2, h2 = height / unit, w2 = width / unit;
  // _unpack_latents: [h2 * w2, c * 4] -> [c, 2 h2, 2 w2], then z / scaling + shift (1 and 0
  // for a tiny autoencoder, as diffusers' AutoencoderTiny configs say).
  const int64_t c = ch / 4, lh = 2 * h2, lw = 2 * w2;
  const float scaling = tiny_ ? 1.0f : static_cast<float>(vae_config_.scaling_factor);
  const float shift = tiny_ ? 0.0f : static_cast<float>(vae_config_.shift_factor);
  std::vector<float> z(static_cast<size_t>(c * lh * lw));
  for (int64_t r = 0; r < h2; ++r) {
    for (int64_t q = 0; q < w2; ++q) {
      for (int64_t cc = 0; cc < c; ++cc) {
        for (int64_t dy = 0; dy < 2; ++dy) {
          for (int64_t dx = 0; dx < 2; ++dx) {
            const float val = latents[(r * w2 + q) * ch + cc * 4 + dy * 2 + dx];
            z[(cc * lh + 2 * r + dy) * lw + 2 * q + dx] = val / scaling + shift;
          }
        }
      }
    }
  }
  std::vector<float> decoded;
  if (tiny_) {
    QS_RETURN_IF_ERROR(tiny_->decode(z.data(), 1, lh, lw, &decoded, pool));  // in [0, 1]
  } else {
    QS_RETURN_IF_ERROR(vae_.decode(z.data(), 1, lh, lw, &decoded, pool));
  }
  FluxImage img;
  img.width = width, img.height = height;
  img.latents = std::move(latents);
  const int64_t hw = width * height;
  img.rgb.resize(static_cast<size_t>(hw * 3));
  for (int64_t p = 0; p < hw; ++p) {
    for (int64_t k = 0; k < 3; ++k) {
      const float out = decoded[k * hw + p];
      img.rgb[p * 3 + k] = std::clamp(tiny_ ? out : out / 2.0f + 0.5f, 0.0f, 1.0f);
    }
  }
  return img;
}

// ---- DiffusionPipeline ----

const PipelineFamilySpec& FluxPipeline::family() const {
  return *family_for_class("FluxPipeline");
}

DiffusionRequest FluxPipeline::resolve(DiffusionRequest req) const {
  const FluxRequest defaults;
  if (!req.width) req.width = default_size();
  if (!req.height) req.height = default_size();
  if (!req.num_frames) req.num_frames = 1;
  if (!req.num_inference_steps) req.num_inference_steps = defaults.steps;
  if (!req.guidance_scale) req.guidance_scale = defaults.guidance_scale;
  if (!req.true_cfg_scale) req.true_cfg_scale = defaults.true_cfg_scale;
  if (!req.max_sequence_length) req.max_sequence_length = defaults.max_sequence_length;
  return req;
}

FluxRequest FluxPipeline::flux_request(const DiffusionRequest& req) const {
  FluxRequest r;
  r.prompt = req.prompt;
  r.negative_prompt = req.negative_prompt;
  // Unresolved fields (a caller that skipped resolve) are 0, which validate refuses.
  r.width = req.width.value_or(0), r.height = req.height.value_or(0);
  r.steps = req.num_inference_steps.value_or(0);
  r.guidance_scale = req.guidance_scale.value_or(r.guidance_scale);
  r.true_cfg_scale = req.true_cfg_scale.value_or(r.true_cfg_scale);
  r.max_sequence_length = req.max_sequence_length.value_or(0);
  r.seed = req.seed;
  r.noise = req.latents;
  r.on_step = req.on_step;
  r.cancelled = req.cancelled;
  return r;
}

Status FluxPipeline::validate(const DiffusionRequest& req) const {
  const PipelineFamilySpec& f = family();
  if (req.num_frames && *req.num_frames != 1) {
    return refuse_field(f, "num_frames", "they make one image");
  }
  if (!req.image.empty()) return refuse_field(f, "an input image", "they generate from text");
  if (req.guidance_scale_2) {
    return refuse_field(f, "guidance_scale_2", "it is a two-expert Wan2.2 A14B setting");
  }
  if (req.boundary_ratio) {
    return refuse_field(f, "boundary_ratio", "it is a two-expert Wan2.2 A14B setting");
  }
  if (req.flow_shift) {
    return refuse_field(f, "flow_shift", "FLUX.1's scheduler shifts by the image size");
  }
  return validate(flux_request(req));
}

std::vector<int64_t> FluxPipeline::latents_shape(const DiffusionRequest& req) const {
  int64_t n_img = 0, ch = 0;
  if (!latent_shape(flux_request(req), &n_img, &ch).ok()) return {};
  return {n_img, ch};
}

size_t FluxPipeline::request_peak_bytes(const DiffusionRequest& req, int threads) const {
  const FluxRequest r = flux_request(req);
  int64_t n_img = 0, ch = 0;
  if (!latent_shape(r, &n_img, &ch).ok()) return 0;
  const bool true_cfg = r.true_cfg_scale > 1.0 && !r.negative_prompt.empty();
  const int64_t batch = true_cfg && !cfg_group_ ? 2 : 1;
  const FluxConfig& f = transformer_.config();
  const size_t f32 = sizeof(float);
  const size_t text = static_cast<size_t>(batch * (r.max_sequence_length * f.joint_attention_dim +
                                                   f.pooled_projection_dim)) *
                      f32;
  // Latents, the prediction(s) and the scheduler's sample; the image as f32 and 8-bit.
  const size_t latents = static_cast<size_t>(n_img * ch) * f32 * (2 + static_cast<size_t>(batch));
  const size_t image = static_cast<size_t>(r.width * r.height * 3) * (f32 + 1);
  return text + latents + image +
         flux_activation_bytes(f, batch, n_img, r.max_sequence_length, threads);
}

Result<std::vector<float>> FluxPipeline::denoise(const DiffusionRequest& req, ThreadPool& pool,
                                                 DiffusionOutput* times) const {
  QS_RETURN_IF_ERROR(validate(req));
  FluxStepTimes t;
  QS_ASSIGN_OR_RETURN(std::vector<float> latents, denoise_timed(flux_request(req), pool, &t));
  if (times) {
    times->step_seconds = std::move(t.step_seconds);
    times->exchange_seconds = std::move(t.exchange_seconds);
  }
  return latents;
}

Result<DiffusionOutput> FluxPipeline::decode(std::vector<float> latents,
                                             const DiffusionRequest& req, ThreadPool& pool) const {
  QS_ASSIGN_OR_RETURN(FluxImage image, decode(std::move(latents), req.width.value_or(0),
                                              req.height.value_or(0), pool));
  DiffusionOutput out;
  out.width = image.width, out.height = image.height, out.frames = 1;
  out.rgb = std::move(image.rgb);
  out.latents = std::move(image.latents);
  return out;
}

Result<std::unique_ptr<DiffusionPipeline>> load_flux_pipeline(const PipelineIndex& index,
                                                              const PipelineLoadOptions& options) {
  FluxLoadOptions flux;
  flux.tiny_vae = options.tiny_vae;
  QS_ASSIGN_OR_RETURN(std::unique_ptr<FluxPipeline> p, FluxPipeline::load(index.dir, flux));
  return std::unique_ptr<DiffusionPipeline>(std::move(p));
}

}  // namespace qs::diffusion
