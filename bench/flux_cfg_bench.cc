// Kernel lab: a FLUX-shaped transformer scaled down to run on a small CPU, bf16 against its
// RTN W4A16 (what `quantize` makes of the pipeline), and true CFG as one batched forward of
// both branches (what the pipeline does: every weight read once per step) against two batch-1
// forwards (diffusers' order). Writes a random-init bf16 transformer directory at FLUX.1's head
// size and width ratios, quantizes it, then times the four forms interleaved.
//   build/flux_cfg_bench [--threads 2] [--reps 5] [--layers 2] [--single-layers 4]
//                        [--heads 6] [--image 256] [--text 128]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/json.h"
#include "diffusion/flux_transformer.h"
#include "io/checkpoint.h"
#include "ops/linear.h"
#include "quant/pipeline.h"

namespace {

using namespace qs;
namespace fs = std::filesystem;

struct Shape {
  int64_t layers = 2, single = 4, heads = 6, image = 256, text = 128;
};

void add(std::vector<std::pair<std::string, Tensor>>* t, const std::string& name,
         std::vector<int64_t> shape, float scale, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : v) x = scale < 0 ? 1.0f : scale * nd(rng);
  t->emplace_back(name, Tensor::from_f32(DType::kBF16, std::move(shape), v));
}

Status write_model(const std::string& dir, const Shape& s) {
  const int64_t hd = 128, joint = 4096, pooled = 768, in = 64;
  diffusion::FluxConfig config;
  config.num_layers = s.layers;
  config.num_single_layers = s.single;
  config.num_attention_heads = s.heads;
  config.attention_head_dim = hd;
  config.in_channels = config.out_channels = in;
  config.joint_attention_dim = joint;
  config.pooled_projection_dim = pooled;
  config.guidance_embeds = true;
  std::mt19937 rng(0);
  std::vector<std::pair<std::string, Tensor>> t;
  // Linears at 1/sqrt(k), biases at 0.01, the q/k RMSNorm weights at 1.
  for (const diffusion::FluxTensorSpec& spec : diffusion::flux_tensor_specs(config)) {
    const bool bias = spec.name.ends_with(".bias");
    const float scale = spec.shape.size() == 2 ? 1.0f / std::sqrt(static_cast<float>(spec.shape[1]))
                                               : (bias ? 0.01f : -1.0f);
    add(&t, spec.name, spec.shape, scale, rng);
  }
  fs::create_directories(dir);
  QS_RETURN_IF_ERROR(io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", t));
  nlohmann::json cfg = {{"_class_name", "FluxTransformer2DModel"},
                        {"attention_head_dim", hd},
                        {"num_attention_heads", s.heads},
                        {"num_layers", s.layers},
                        {"num_single_layers", s.single},
                        {"in_channels", in},
                        {"joint_attention_dim", joint},
                        {"pooled_projection_dim", pooled},
                        {"guidance_embeds", true},
                        {"axes_dims_rope", {16, 56, 56}},
                        {"patch_size", 1}};
  return write_json(dir + "/config.json", cfg);
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

}  // namespace

int main(int argc, char** argv) {
  Shape s;
  int threads = 2, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--threads")
      threads = static_cast<int>(v);
    else if (a == "--reps")
      reps = static_cast<int>(v);
    else if (a == "--layers")
      s.layers = v;
    else if (a == "--single-layers")
      s.single = v;
    else if (a == "--heads")
      s.heads = v;
    else if (a == "--image")
      s.image = v;
    else if (a == "--text")
      s.text = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  // A pipeline directory holding just the transformer (all quantize_pipeline needs), and its
  // RTN W4A16 (int4 g128 sym, auto_round) sibling.
  const fs::path root =
      fs::temp_directory_path() / ("qs_flux_cfg_bench_" + std::to_string(::getpid()));
  const std::string pipe = (root / "bf16").string(), pipe_w4 = (root / "w4a16").string();
  auto fail = [&](const Status& st) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    fs::remove_all(root);
    return 1;
  };
  Status st = write_model(pipe + "/transformer", s);
  if (st.ok())
    st = write_json(pipe + "/model_index.json",
                    {{"_class_name", "FluxPipeline"},
                     {"transformer", {"diffusers", "FluxTransformer2DModel"}}});
  if (!st.ok()) return fail(st);
  quant::QuantizeOptions qo;
  qo.model_dir = pipe;
  qo.output_dir = pipe_w4;
  qo.iters = 0;
  qo.disable_opt_rtn = true;
  qo.threads = threads;
  auto summary = quant::quantize(qo, nullptr, nullptr, nullptr);
  if (!summary.ok()) return fail(summary.status());
  auto bf16 = diffusion::FluxTransformer::load(pipe + "/transformer");
  if (!bf16.ok()) return fail(bf16.status());
  auto w4 = diffusion::FluxTransformer::load(pipe_w4 + "/transformer");
  if (!w4.ok()) return fail(w4.status());
  const auto& f = bf16->config();
  const int64_t side = s.image / 16, ni = side * side, nt = s.text;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  std::vector<float> img = randv(2 * ni * f.in_channels),
                     txt = randv(2 * nt * f.joint_attention_dim),
                     pooled = randv(2 * f.pooled_projection_dim), t = {0.5f, 0.5f},
                     g = {3.5f, 3.5f}, img_ids(ni * 3, 0.0f), txt_ids(nt * 3, 0.0f);
  for (int64_t r = 0; r < side; ++r) {
    for (int64_t c = 0; c < side; ++c)
      img_ids[(r * side + c) * 3 + 1] = r, img_ids[(r * side + c) * 3 + 2] = c;
  }
  ThreadPool pool(threads);
  std::vector<float> out(2 * ni * f.in_channels);
  auto run = [&](const diffusion::FluxTransformer& model, int64_t b, int64_t item) {
    diffusion::FluxInputs in{b,
                             ni,
                             nt,
                             img.data() + item * ni * f.in_channels,
                             txt.data() + item * nt * f.joint_attention_dim,
                             pooled.data() + item * f.pooled_projection_dim,
                             t.data(),
                             g.data(),
                             img_ids.data(),
                             txt_ids.data()};
    QS_CHECK(model.forward(in, out.data(), pool).ok());
  };
  struct Timings {
    std::vector<double> batched, sequential;
  };
  Timings tb, tw;
  auto time_cfg = [&](const diffusion::FluxTransformer& model, Timings* tm) {
    auto t0 = std::chrono::steady_clock::now();
    run(model, 2, 0);
    tm->batched.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    run(model, 1, 0);
    run(model, 1, 1);
    tm->sequential.push_back(seconds_since(t0));
  };
  run(*bf16, 2, 0);  // warm-up: page in the weights
  run(*w4, 2, 0);
  for (int r = 0; r < reps; ++r) {
    time_cfg(*bf16, &tb);
    time_cfg(*w4, &tw);
  }
  std::printf(
      "flux transformer: %lld double + %lld single blocks, %lld heads x 128 (inner %lld), "
      "%lld image + %lld text tokens (%lldx%lld px), %d threads, %d reps, interleaved\n",
      static_cast<long long>(s.layers), static_cast<long long>(s.single),
      static_cast<long long>(s.heads), static_cast<long long>(f.inner_dim()),
      static_cast<long long>(ni), static_cast<long long>(nt), static_cast<long long>(s.image),
      static_cast<long long>(s.image), threads, reps);
  std::printf("W4A16: %s, %lld linears quantized, activations %s\n", summary->scheme.c_str(),
              static_cast<long long>(summary->n_quantized),
              ops::activation_precision_name(ops::activation_precision()));
  std::printf("| weights | batch 2 (true CFG step) | 2 x batch 1 | sequential / batched |\n");
  std::printf("|---|---|---|---|\n");
  double mb16 = 0, mb4 = 0, ms16 = 0, ms4 = 0;
  for (auto [name, tm, mb, ms] :
       {std::tuple{"bf16", &tb, &mb16, &ms16}, std::tuple{"W4A16", &tw, &mb4, &ms4}}) {
    double sb, ss;
    mean_sd(tm->batched, mb, &sb);
    mean_sd(tm->sequential, ms, &ss);
    std::printf("| %s | %.3f +- %.3f s | %.3f +- %.3f s | %.2fx |\n", name, *mb, sb, *ms, ss,
                *ms / *mb);
  }
  std::printf("bf16 / W4A16 step time: batch 2 %.2fx, batch 1 %.2fx\n", mb16 / mb4, ms16 / ms4);
  // FLUX.1-dev's default 28 steps; the text encoders and the VAE run once an image and are not
  // at FLUX's shapes here, so they are left out.
  std::printf(
      "per image, 28 steps, transformer only: bf16 %.1f s (true CFG batched) / %.1f s "
      "(guidance-distilled, batch 1: half of 2 x batch 1); W4A16 %.1f s / %.1f s\n",
      28 * mb16, 28 * ms16 / 2, 28 * mb4, 28 * ms4 / 2);
  fs::remove_all(root);
  return 0;
}
