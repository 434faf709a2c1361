// Kernel lab: a Wan2.2-TI2V-5B-shaped transformer scaled down to run on a small CPU, bf16 against
// its RTN W4A16 (what `quantize` makes of the pipeline), and a CFG step as one batched forward of
// both branches (what WanPipeline does: every weight read once per step) against two batch-1
// forwards (diffusers' order). Writes a random-init bf16 WanTransformer3DModel directory at
// TI2V-5B's head size and width ratios, quantizes it, then times the four forms interleaved.
//   build/bench/wan_cfg_bench [--threads 2] [--reps 5] [--layers 2] [--heads 6] [--ffn 3584]
//                             [--height 256] [--width 256] [--frames 17] [--text 512]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "core/json.h"
#include "diffusion/wan_transformer.h"
#include "io/checkpoint.h"
#include "ops/linear.h"
#include "quant/pipeline.h"

namespace {

using namespace qs;
namespace fs = std::filesystem;

// TI2V-5B's transformer/config.json: 24 heads x 128, ffn 14336 (4.67 x inner), 30 layers,
// 48 latent channels in and out, UMT5-XXL text (4096), patch 1x2x2. Its VAE (Wan2.2's
// AutoencoderKLWan) compresses 16x in space and 4x in time, so a token covers 32x32 pixels.
constexpr int64_t kHeadDim = 128, kFullHeads = 24, kFullFfn = 14336, kFullLayers = 30;
constexpr int64_t kChannels = 48, kTextDim = 4096, kFreqDim = 256;
constexpr int64_t kSpatialScale = 16, kTemporalScale = 4, kPatch = 2;
constexpr int kSteps = 50;  // WanPipeline's default num_inference_steps

struct Shape {
  int64_t layers = 2, heads = 6, ffn = 3584;
  int64_t height = 256, width = 256, frames = 17;  // pixels and pixel frames
  int64_t text = 512;                              // Wan's max_sequence_length
};

diffusion::WanTransformerConfig wan_config(int64_t layers, int64_t heads, int64_t ffn) {
  diffusion::WanTransformerConfig c;
  c.patch_size = {1, kPatch, kPatch};
  c.num_attention_heads = heads;
  c.attention_head_dim = kHeadDim;
  c.in_channels = c.out_channels = kChannels;
  c.text_dim = kTextDim;
  c.freq_dim = kFreqDim;
  c.ffn_dim = ffn;
  c.num_layers = layers;
  return c;
}

Status write_model(const std::string& dir, const diffusion::WanTransformerConfig& c) {
  std::mt19937 rng(0);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::pair<std::string, Tensor>> t;
  // Matmul weights (the patch Conv3d too) at 1/sqrt(fan-in), the modulation tables at
  // 1/sqrt(inner) as diffusers initialises them, biases at 0.01, norm weights at 1: activations
  // stay finite through the blocks, so no denormal or NaN path skews a timing.
  for (const models::TensorSpec& spec : diffusion::wan_transformer_tensor_specs(c)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    float scale = 0;
    if (spec.name.ends_with("scale_shift_table"))
      scale = 1.0f / std::sqrt(static_cast<float>(c.inner_dim()));
    else if (spec.shape.size() >= 2)
      scale = 1.0f / std::sqrt(static_cast<float>(n / spec.shape[0]));
    else if (spec.name.ends_with(".bias"))
      scale = 0.01f;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = scale == 0 ? 1.0f : scale * nd(rng);
    t.emplace_back(spec.name, Tensor::from_f32(DType::kBF16, spec.shape, v));
  }
  fs::create_directories(dir);
  QS_RETURN_IF_ERROR(io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", t));
  nlohmann::json cfg = {{"_class_name", "WanTransformer3DModel"},
                        {"added_kv_proj_dim", nullptr},
                        {"attention_head_dim", kHeadDim},
                        {"cross_attn_norm", true},
                        {"eps", 1e-6},
                        {"ffn_dim", c.ffn_dim},
                        {"freq_dim", kFreqDim},
                        {"image_dim", nullptr},
                        {"in_channels", kChannels},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_layers", c.num_layers},
                        {"out_channels", kChannels},
                        {"patch_size", c.patch_size},
                        {"pos_embed_seq_len", nullptr},
                        {"qk_norm", "rms_norm_across_heads"},
                        {"rope_max_seq_len", 1024},
                        {"text_dim", kTextDim}};
  return write_json(dir + "/config.json", cfg);
}

// Multiply-adds x 2 of one forward's matmuls: the patch embedding, the text embedder, per block
// self-attention (q, k, v, out and the two attention products), cross-attention (q, out over
// the video tokens, k, v over the text, the two products) and the MLP, then proj_out. The
// timestep embedder runs on one row per distinct timestep and is left out.
double forward_flops(const diffusion::WanTransformerConfig& c, int64_t batch, int64_t seq,
                     int64_t n_text) {
  const double b = batch, s = seq, t = n_text, d = c.inner_dim(), p = c.patch_volume();
  const double rows = b * s;
  const double block = 6 * rows * d * d + 2 * b * t * d * d + 2 * rows * d * c.ffn_dim +
                       2 * b * s * s * d + 2 * b * s * t * d;
  const double outside = rows * d * c.in_channels * p + b * t * (c.text_dim * d + d * d) +
                         rows * d * c.out_channels * p;
  return 2 * (outside + c.num_layers * block);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void mean_sd(const std::vector<double>& v, double* mean, double* sd) {
  double s = 0, ss = 0;
  for (double x : v) s += x;
  *mean = s / v.size();
  for (double x : v) ss += (x - *mean) * (x - *mean);
  *sd = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0.0;
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

}  // namespace

int main(int argc, char** argv) {
  Shape s;
  int threads = 2, reps = 5;
  if (argc % 2 == 0) {
    std::fprintf(stderr, "flag %s has no value\n", argv[argc - 1]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--threads")
      threads = static_cast<int>(v);
    else if (a == "--reps")
      reps = static_cast<int>(v);
    else if (a == "--layers")
      s.layers = v;
    else if (a == "--heads")
      s.heads = v;
    else if (a == "--ffn")
      s.ffn = v;
    else if (a == "--height")
      s.height = v;
    else if (a == "--width")
      s.width = v;
    else if (a == "--frames")
      s.frames = v;
    else if (a == "--text")
      s.text = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (threads < 1 || reps < 1 || s.layers < 1 || s.heads < 1 || s.ffn < 1 || s.text < 1) {
    std::fprintf(stderr, "--threads, --reps, --layers, --heads, --ffn and --text must be >= 1\n");
    return 2;
  }
  constexpr int64_t kPixelsPerToken = kSpatialScale * kPatch;
  if (s.height <= 0 || s.width <= 0 || s.height % kPixelsPerToken != 0 ||
      s.width % kPixelsPerToken != 0 || s.frames < 1 || (s.frames - 1) % kTemporalScale != 0) {
    std::fprintf(stderr,
                 "--height %lld --width %lld --frames %lld: height and width must be positive "
                 "multiples of 32 (16x VAE, patch 2) and frames 4k+1 (WanPipeline's rule)\n",
                 static_cast<long long>(s.height), static_cast<long long>(s.width),
                 static_cast<long long>(s.frames));
    return 2;
  }
  const double load_before = load_average();
  // A pipeline directory holding just the transformer (all quantize_pipeline needs), and its
  // RTN W4A16 (int4 g128 sym, auto_round) sibling.
  const fs::path root =
      fs::temp_directory_path() / ("qs_wan_cfg_bench_" + std::to_string(::getpid()));
  const std::string pipe = (root / "bf16").string(), pipe_w4 = (root / "w4a16").string();
  auto fail = [&](const Status& st) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    fs::remove_all(root);
    return 1;
  };
  const diffusion::WanTransformerConfig config = wan_config(s.layers, s.heads, s.ffn);
  Status st = write_model(pipe + "/transformer", config);
  if (st.ok())
    st = write_json(pipe + "/model_index.json",
                    {{"_class_name", "WanPipeline"},
                     {"expand_timesteps", true},
                     {"transformer", {"diffusers", "WanTransformer3DModel"}},
                     {"transformer_2", {nullptr, nullptr}}});
  if (!st.ok()) return fail(st);
  quant::QuantizeOptions qo;
  qo.model_dir = pipe;
  qo.output_dir = pipe_w4;
  qo.iters = 0;
  qo.disable_opt_rtn = true;
  qo.threads = threads;
  auto summary = quant::quantize(qo, nullptr, nullptr, nullptr);
  if (!summary.ok()) return fail(summary.status());
  auto bf16 = diffusion::WanTransformer::load(pipe + "/transformer");
  if (!bf16.ok()) return fail(bf16.status());
  auto w4 = diffusion::WanTransformer::load(pipe_w4 + "/transformer");
  if (!w4.ok()) return fail(w4.status());

  // The latent grid: WanPipeline's (frames - 1) / 4 + 1 latent frames of (h / 16) x (w / 16).
  const int64_t lf = (s.frames - 1) / kTemporalScale + 1, lh = s.height / kSpatialScale,
                lw = s.width / kSpatialScale;
  const int64_t per_frame = (lh / kPatch) * (lw / kPatch), seq = lf * per_frame, nt = s.text;
  const int64_t latent = kChannels * lf * lh * lw;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  std::vector<float> lat = randv(2 * latent), txt = randv(2 * nt * kTextDim);
  // TI2V's expand_timesteps with an image: the first latent frame (the encoded image) at
  // timestep 0, every other token at the step's t (mid-schedule here).
  std::vector<float> tstep(2 * seq, 500.0f);
  for (int64_t b = 0; b < 2; ++b) std::fill_n(tstep.begin() + b * seq, per_frame, 0.0f);
  ThreadPool pool(threads);
  std::vector<float> out(2 * latent);
  auto run = [&](const diffusion::WanTransformer& model, int64_t b, int64_t item) {
    diffusion::WanInputs in;
    in.batch = b;
    in.frames = lf;
    in.height = lh;
    in.width = lw;
    in.latents = lat.data() + item * latent;
    in.timestep = tstep.data() + item * seq;
    in.per_token_timestep = true;
    in.n_text = nt;
    in.text = txt.data() + item * nt * kTextDim;
    const Status rs = model.forward(in, out.data(), pool);
    QS_CHECK(rs.ok());
  };
  struct Timings {
    std::vector<double> batched, sequential;
  };
  Timings tb, tw;
  auto time_cfg = [&](const diffusion::WanTransformer& model, Timings* tm) {
    auto t0 = std::chrono::steady_clock::now();
    run(model, 2, 0);
    tm->batched.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    run(model, 1, 0);
    run(model, 1, 1);
    tm->sequential.push_back(seconds_since(t0));
  };
  // Warm-up (pages in the weights), checked finite: a NaN or overflow would time another path.
  for (const diffusion::WanTransformer* model : {&*bf16, &*w4}) {
    run(*model, 2, 0);
    for (float v : out) {
      if (!std::isfinite(v)) return fail(internal_error("wan transformer: non-finite output"));
    }
  }
  for (int r = 0; r < reps; ++r) {
    time_cfg(*bf16, &tb);
    time_cfg(*w4, &tw);
  }
  const double load_after = load_average();

  std::printf(
      "wan transformer: %lld layers, %lld heads x %lld (inner %lld), ffn %lld, %lld channels; "
      "%lldx%lldx%lld px video -> latent %lldx%lldx%lld -> %lld video + %lld text tokens; "
      "%d threads, %d reps, interleaved; load average %.2f before, %.2f after\n",
      static_cast<long long>(s.layers), static_cast<long long>(s.heads),
      static_cast<long long>(kHeadDim), static_cast<long long>(config.inner_dim()),
      static_cast<long long>(s.ffn), static_cast<long long>(kChannels),
      static_cast<long long>(s.height), static_cast<long long>(s.width),
      static_cast<long long>(s.frames), static_cast<long long>(lf), static_cast<long long>(lh),
      static_cast<long long>(lw), static_cast<long long>(seq), static_cast<long long>(nt), threads,
      reps, load_before, load_after);
  std::printf("W4A16: %s, %lld linears quantized, activations %s\n", summary->scheme.c_str(),
              static_cast<long long>(summary->n_quantized),
              ops::activation_precision_name(ops::activation_precision()));
  const double flops = forward_flops(config, 2, seq, nt);
  std::printf("| weights | batch 2 (CFG step) | 2 x batch 1 | sequential / batched | GFLOP/s |\n");
  std::printf("|---|---|---|---|---|\n");
  double mb16 = 0, mb4 = 0, ms16 = 0, ms4 = 0;
  for (auto [name, tm, mb, ms] :
       {std::tuple{"bf16", &tb, &mb16, &ms16}, std::tuple{"W4A16", &tw, &mb4, &ms4}}) {
    double sb, ss;
    mean_sd(tm->batched, mb, &sb);
    mean_sd(tm->sequential, ms, &ss);
    std::printf("| %s | %.3f +- %.3f s | %.3f +- %.3f s | %.2fx | %.0f |\n", name, *mb, sb, *ms, ss,
                *ms / *mb, flops / *mb * 1e-9);
  }
  std::printf("bf16 / W4A16 step time: batch 2 %.2fx, 2 x batch 1 %.2fx\n", mb16 / mb4, ms16 / ms4);
  // Only the blocks repeat; the embedders and proj_out run once a forward, so scaling the whole
  // step by layers overstates the extrapolation by about their share, printed here.
  const double outside = forward_flops(wan_config(0, s.heads, s.ffn), 2, seq, nt);
  std::printf("matmul work of one CFG step: %.1f GFLOP here, %.0f%% of it outside the blocks\n",
              flops * 1e-9, 100 * outside / flops);
  const double x = static_cast<double>(kFullLayers) / s.layers;
  std::printf(
      "extrapolated to %lld layers at this width (step time x %lld / %lld, not measured): "
      "bf16 %.2f s a step, %.0f s a %d-step video; W4A16 %.2f s, %.0f s (batched CFG)\n",
      static_cast<long long>(kFullLayers), static_cast<long long>(kFullLayers),
      static_cast<long long>(s.layers), x * mb16, x * mb16 * kSteps, kSteps, x * mb4,
      x * mb4 * kSteps);
  // The real width (24 heads, ffn 14336) at the measured rate: an estimate that assumes the
  // wider GEMMs run no faster per FLOP than these.
  const double full = forward_flops(wan_config(kFullLayers, kFullHeads, kFullFfn), 2, seq, nt);
  std::printf(
      "full TI2V-5B (%lld heads, ffn %lld, %lld layers) at this grid: %.1f TFLOP a CFG step; "
      "at the measured GFLOP/s (estimate, not measured): bf16 %.1f s a step, %.0f s a video; "
      "W4A16 %.1f s, %.0f s\n",
      static_cast<long long>(kFullHeads), static_cast<long long>(kFullFfn),
      static_cast<long long>(kFullLayers), full * 1e-12, full / flops * mb16,
      full / flops * mb16 * kSteps, full / flops * mb4, full / flops * mb4 * kSteps);
  fs::remove_all(root);
  return 0;
}
