// quant: AutoRound of Wan transformers (wan_tuner.h).
#include "quant/wan_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "diffusion/wan_pipeline.h"
#include "formats/rtn.h"
#include "models/component.h"
#include "quant/tune_common.h"

namespace qs::quant {

namespace {

// A handful of everyday scenes, for runs without --dataset (auto-round's default diffusion set
// is COCO captions, which a build cannot fetch; short captions of the same kind stand in).
const char* const kBuiltinPrompts[] = {
    "A cat walks across a sunny garden path.",
    "Waves roll onto a sandy beach at sunset.",
    "A red car drives along a mountain road.",
    "Two people talk at a table in a busy cafe.",
    "A dog catches a frisbee in a park.",
    "Snow falls on a quiet street at night.",
    "A chef chops vegetables in a kitchen.",
    "A hot air balloon rises over green hills.",
    "Children play football on a school field.",
    "A train passes through a forest in autumn.",
    "A bird lands on a branch beside a lake.",
    "City traffic moves under tall buildings in the rain.",
    "A woman rides a bicycle along a canal.",
    "Fish swim around a coral reef.",
    "A candle flickers on a wooden table.",
    "Clouds drift over a field of sunflowers.",
};

Status check_calibration(const WanBlockTensors<float>& b, const WanBlockCalibration& c,
                         bool need_targets) {
  if (c.n_samples <= 0 || c.seq <= 0 || c.inputs == nullptr || (need_targets && !c.targets) ||
      static_cast<int64_t>(c.conditioning.size()) != c.n_samples) {
    return invalid_argument(
        "autoround: Wan block calibration needs n_samples > 0, seq > 0, "
        "inputs, targets and one conditioning per sample");
  }
  for (const WanConditioning<float>& k : c.conditioning) {
    if (k.seq != c.seq || k.n_text <= 0 || (k.n_mod != 1 && k.n_mod != c.seq) || !k.timestep_proj ||
        !k.text || !k.cos || !k.sin) {
      return invalid_argument("autoround: a Wan sample's conditioning does not match seq " +
                              std::to_string(c.seq));
    }
  }
  return check_wan_block(b, "autoround");
}

Status check_weights(const WanBlockTensors<float>& b,
                     const PerLinear<const formats::QuantizedWeight*>& weights) {
  if (static_cast<int>(weights.size()) != kWanLinears) {
    return invalid_argument("autoround: " + std::to_string(weights.size()) +
                            " weights for a Wan block of " + std::to_string(kWanLinears));
  }
  for (int i = 0; i < kWanLinears; ++i) {
    if (weights[i] && (weights[i]->n != b.out_features(i) || weights[i]->k != b.in_features(i))) {
      return invalid_argument(std::string("autoround: ") + wan_linear_name(i) +
                              ": quantized weight shape does not match the block");
    }
  }
  return ok_status();
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// What one transformer's calls left: per sample the first block's input and the conditioning
// rows it used; the rope tables are the same for every call (one video size).
struct CapturedCalls {
  int64_t seq = 0, n_text = 0, dim = 0;
  std::vector<float> cos, sin;
  std::vector<std::vector<float>> x, tproj, text;
  std::vector<int64_t> n_mod;
};

// The tap's conditioning callback keeps the rows until block 0's input arrives.
struct PendingCall {
  std::vector<std::vector<float>> tproj, text;
  std::vector<int64_t> n_mod;
};

diffusion::WanBlockTap make_tap(CapturedCalls* calls, PendingCall* pending, int64_t dim,
                                int64_t head_dim) {
  diffusion::WanBlockTap tap;
  tap.conditioning = [calls, pending, dim,
                      head_dim](const diffusion::WanBlockTap::Conditioning& c) {
    if (calls->seq != 0 && (calls->seq != c.seq || calls->n_text != c.n_text)) {
      return internal_error("Wan calibration: the calls' shapes changed between steps");
    }
    calls->seq = c.seq;
    calls->n_text = c.n_text;
    calls->dim = dim;
    if (calls->cos.empty()) {
      const int64_t n = c.seq * head_dim / 2;
      calls->cos.assign(c.cos, c.cos + n);
      calls->sin.assign(c.sin, c.sin + n);
    }
    *pending = PendingCall();
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t* idx = c.mod_index + b * c.seq;
      const bool per_token = std::any_of(idx, idx + c.seq, [&](int64_t i) { return i != idx[0]; });
      std::vector<float> rows;
      for (int64_t t = 0; t < (per_token ? c.seq : 1); ++t) {
        const float* r = c.timestep_proj + idx[t] * 6 * dim;
        rows.insert(rows.end(), r, r + 6 * dim);
      }
      pending->tproj.push_back(std::move(rows));
      pending->n_mod.push_back(per_token ? c.seq : 1);
      const float* text = c.text + b * c.n_text * dim;
      pending->text.emplace_back(text, text + c.n_text * dim);
    }
    return ok_status();
  };
  tap.block_input = [calls, pending, dim](int64_t index, const float* x) {
    if (index != 0) return ok_status();
    for (size_t b = 0; b < pending->tproj.size(); ++b) {
      const float* xb = x + static_cast<int64_t>(b) * calls->seq * dim;
      calls->x.emplace_back(xb, xb + calls->seq * dim);
      calls->tproj.push_back(std::move(pending->tproj[b]));
      calls->text.push_back(std::move(pending->text[b]));
      calls->n_mod.push_back(pending->n_mod[b]);
    }
    return ok_status();
  };
  return tap;
}

}  // namespace

Result<TuneResult> tune_wan_block(const WanBlockTensors<float>& b,
                                  const PerLinear<formats::QuantScheme>& schemes,
                                  const WanBlockCalibration& calib, const TuneOptions& opt,
                                  ThreadPool& pool, const TuneProgress& progress) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, true));
  const int64_t row = calib.seq * b.dim;
  TunableBlock t;
  t.n_samples = calib.n_samples;
  for (int i = 0; i < kWanLinears; ++i) {
    t.w.push_back(b.w[i].data());
    t.out.push_back(b.out_features(i));
    t.in.push_back(b.in_features(i));
    t.names.push_back(wan_linear_name(i));
  }
  t.elements = [&](const std::vector<int64_t>& samples) {
    return static_cast<int64_t>(samples.size()) * row;
  };
  std::vector<float> y(row), dy(row);
  WanBlockActivations<float> act;
  t.step = [&](const std::vector<int64_t>& samples, const PerLinear<const float*>& w, float scale,
               const PerLinear<float*>& dw) {
    double sum = 0;
    for (int64_t s : samples) {
      const WanConditioning<float>& c = calib.conditioning[s];
      wan_block_forward<float>(b, w, c, calib.inputs + s * row, &act, y.data(), pool);
      sum += squared_error(y.data(), calib.targets + s * row, nullptr, calib.seq, b.dim, scale,
                           dy.data());
      wan_block_backward<float>(b, w, c, act, dy.data(), nullptr, dw, pool);
    }
    return sum;
  };
  return signsgd_tune(t, schemes, opt, pool, progress);
}

Status wan_block_output(const WanBlockTensors<float>& b,
                        const PerLinear<const formats::QuantizedWeight*>& weights,
                        const WanBlockCalibration& calib, float* out, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, false));
  QS_RETURN_IF_ERROR(check_weights(b, weights));
  PerLinear<std::vector<float>> deq(kWanLinears);
  PerLinear<const float*> w(kWanLinears);
  for (int i = 0; i < kWanLinears; ++i) {
    w[i] = b.w[i].data();
    if (weights[i] == nullptr) continue;
    deq[i].resize(b.w[i].size());
    formats::dequantize(*weights[i], deq[i].data());
    w[i] = deq[i].data();
  }
  const int64_t row = calib.seq * b.dim;
  WanBlockActivations<float> act;
  for (int64_t s = 0; s < calib.n_samples; ++s) {
    wan_block_forward<float>(b, w, calib.conditioning[s], calib.inputs + s * row, &act,
                             out + s * row, pool);
  }
  return ok_status();
}

Result<double> wan_block_loss(const WanBlockTensors<float>& b,
                              const PerLinear<const formats::QuantizedWeight*>& weights,
                              const WanBlockCalibration& calib, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_calibration(b, calib, true));
  const int64_t n = calib.n_samples * calib.seq;
  std::vector<float> y(static_cast<size_t>(n * b.dim));
  QS_RETURN_IF_ERROR(wan_block_output(b, weights, calib, y.data(), pool));
  return squared_error(y.data(), calib.targets, nullptr, n, b.dim, 0, nullptr) /
         static_cast<double>(n * b.dim);
}

Result<std::vector<std::string>> wan_calibration_prompts(const std::string& dataset,
                                                         int64_t nsamples) {
  if (nsamples < 1) return invalid_argument("--nsamples must be >= 1");
  std::vector<std::string> all;
  if (dataset.empty()) {
    all.assign(std::begin(kBuiltinPrompts), std::end(kBuiltinPrompts));
  } else {
    std::ifstream in(dataset);
    if (!in) return io_error("cannot read the prompt file " + dataset);
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) all.push_back(line);
    }
    if (all.empty()) return invalid_argument(dataset + ": no prompts (one per line expected)");
  }
  // As auto-round: fewer prompts than nsamples calibrate on what there is.
  all.resize(std::min<size_t>(all.size(), static_cast<size_t>(nsamples)));
  return all;
}

Result<WanTuned> tune_wan_pipeline(const QuantizeOptions& o, const std::vector<std::string>& names,
                                   const std::vector<const QuantPlan*>& plans,
                                   const WanCalibrationSettings& settings,
                                   const std::function<bool()>& cancelled) {
  if (names.size() != plans.size()) return internal_error("tune_wan_pipeline: names vs plans");
  QS_ASSIGN_OR_RETURN(std::vector<std::string> prompts,
                      wan_calibration_prompts(o.dataset, o.nsamples));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::WanPipeline> pipe,
                      diffusion::WanPipeline::load(o.model_dir));
  if (pipe->image_to_video()) {
    return unimplemented(o.model_dir +
                         " is an image-to-video pipeline: AutoRound calibration runs text "
                         "prompts only (pass --iters 0 --disable_opt_rtn for RTN)");
  }
  ThreadPool pool(std::max(1, o.threads));
  // The transformers in `names` order, as the pipeline loaded them.
  std::vector<const diffusion::WanTransformer*> xfs;
  for (const std::string& name : names) {
    const diffusion::WanTransformer* x = name == "transformer"     ? pipe->transformer()
                                         : name == "transformer_2" ? pipe->transformer_2()
                                                                   : nullptr;
    if (x == nullptr) return invalid_argument(o.model_dir + ": no loaded transformer " + name);
    xfs.push_back(x);
  }
  std::vector<CapturedCalls> calls(xfs.size());
  std::vector<PendingCall> pending(xfs.size());
  std::vector<diffusion::WanBlockTap> taps;
  for (size_t e = 0; e < xfs.size(); ++e) {
    taps.push_back(make_tap(&calls[e], &pending[e], xfs[e]->config().inner_dim(),
                            xfs[e]->config().attention_head_dim));
  }
  // The transformers hold pointers into `taps` until unset, on every way out.
  struct Untap {
    const std::vector<const diffusion::WanTransformer*>& xfs;
    ~Untap() {
      for (const auto* x : xfs) x->set_tap(nullptr);
    }
  } untap{xfs};
  for (size_t e = 0; e < xfs.size(); ++e) xfs[e]->set_tap(&taps[e]);

  const auto calib_start = std::chrono::steady_clock::now();
  const int64_t side = settings.patches_per_side * pipe->spatial_multiple();
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (cancelled && cancelled())
      return io_error("interrupted; " + o.output_dir + " left as it was");
    diffusion::WanRequest req;
    req.prompt = prompts[p];
    req.width = req.height = side;
    req.num_frames = settings.num_frames;
    req.steps = settings.steps;
    req.guidance_scale = settings.guidance_scale;
    req.max_sequence_length = settings.max_sequence_length;
    req.seed = o.seed + p;
    QS_RETURN_IF_ERROR(pipe->validate(req));
    QS_RETURN_IF_ERROR(pipe->denoise(req, pool).status());
  }
  for (size_t e = 0; e < xfs.size(); ++e) xfs[e]->set_tap(nullptr);
  WanTuned out;
  out.calibration = std::to_string(prompts.size()) + " prompts (" +
                    (o.dataset.empty() ? std::string("built-in") : o.dataset) + ") x " +
                    std::to_string(settings.steps) + " steps at " + std::to_string(side) + "x" +
                    std::to_string(side) + "x" + std::to_string(settings.num_frames) +
                    ", guidance " + std::to_string(settings.guidance_scale).substr(0, 4) + " (";
  for (size_t e = 0; e < xfs.size(); ++e) {
    out.calibration += (e ? ", " : "") + names[e] + " " + std::to_string(calls[e].x.size()) +
                       (calls[e].x.empty() ? " (RTN)" : "");
  }
  out.calibration +=
      " calls), " + std::to_string(static_cast<int>(seconds_since(calib_start))) + " s";

  TuneOptions t;
  t.iters = static_cast<int>(o.iters);
  t.lr = o.lr;
  t.minmax_lr = o.minmax_lr;
  t.batch_size = static_cast<int>(o.batch_size);
  t.gradient_accumulate_steps = static_cast<int>(o.gradient_accumulate_steps);
  t.seed = o.seed;
  const auto tune_start = std::chrono::steady_clock::now();
  for (size_t e = 0; e < xfs.size(); ++e) {
    CapturedCalls& cc = calls[e];
    TunedModel model;
    const QuantPlan& plan = *plans[e];
    if (cc.x.empty()) {
      // No step ran this expert (its boundary outside the calibration steps): plain RTN, as
      // export_weights packs every planned linear it is not handed.
      out.models.push_back(std::move(model));
      continue;
    }
    const diffusion::WanTransformerConfig& f = xfs[e]->config();
    QS_ASSIGN_OR_RETURN(
        models::Component comp,
        models::Component::open((std::filesystem::path(o.model_dir) / names[e]).string()));
    const int64_t n = static_cast<int64_t>(cc.x.size()), row = cc.seq * cc.dim;
    WanBlockCalibration calib;
    calib.n_samples = n;
    calib.seq = cc.seq;
    for (int64_t s = 0; s < n; ++s) {
      calib.conditioning.push_back({cc.seq, cc.n_text, cc.n_mod[s], cc.tproj[s].data(),
                                    cc.text[s].data(), cc.cos.data(), cc.sin.data()});
    }
    std::vector<float> x_fp(static_cast<size_t>(n * row)), targets(x_fp.size());
    for (int64_t s = 0; s < n; ++s)
      std::copy(cc.x[s].begin(), cc.x[s].end(), x_fp.begin() + s * row);
    cc.x.clear();
    cc.x.shrink_to_fit();
    std::vector<float> x_q = x_fp;
    std::map<std::string, const LayerPlan*> by_module;
    for (const LayerPlan& l : plan.layers) by_module[l.module] = &l;
    for (int64_t i = 0; i < f.num_layers; ++i) {
      if (cancelled && cancelled())
        return io_error("interrupted; " + o.output_dir + " left as it was");
      const auto block_start = std::chrono::steady_clock::now();
      QS_ASSIGN_OR_RETURN(WanBlockTensors<float> block, load_wan_block(comp, f, i));
      const std::string prefix = "blocks." + std::to_string(i) + ".";
      PerLinear<formats::QuantScheme> schemes(kWanLinears);
      for (int j = 0; j < kWanLinears; ++j) {
        const std::string module = prefix + wan_linear_name(j);
        auto it = by_module.find(module);
        if (it != by_module.end() && it->second->quantize)
          schemes[j] = plan.parsed.scheme_for(module);
      }
      // FP chain: the original block on X_fp gives the targets.
      const PerLinear<const formats::QuantizedWeight*> fp(kWanLinears, nullptr);
      calib.inputs = x_fp.data();
      QS_RETURN_IF_ERROR(wan_block_output(block, fp, calib, targets.data(), pool));
      calib.inputs = x_q.data();
      calib.targets = targets.data();
      QS_ASSIGN_OR_RETURN(TuneResult tuned, tune_wan_block(block, schemes, calib, t, pool));
      PerLinear<formats::QuantizedWeight> rtn(kWanLinears);
      PerLinear<const formats::QuantizedWeight*> q(kWanLinears, nullptr), r(kWanLinears, nullptr);
      for (int j = 0; j < kWanLinears; ++j) {
        if (!tuned.weights[j]) continue;
        const formats::QuantScheme& s = schemes[j];
        rtn[j] = formats::rtn_quantize(block.w[j].data(), block.out_features(j),
                                       block.in_features(j), s.bits, s.group_size, s.sym);
        q[j] = &*tuned.weights[j];
        r[j] = &rtn[j];
      }
      BlockReport report;
      report.layer =
          (names.size() > 1 ? names[e] + "." : std::string()) + prefix.substr(0, prefix.size() - 1);
      report.index = i;
      report.total = f.num_layers;
      report.iter = report.iters = t.iters;
      report.best_iter = tuned.best_iter;
      QS_ASSIGN_OR_RETURN(report.initial_loss, wan_block_loss(block, r, calib, pool));
      QS_ASSIGN_OR_RETURN(report.best_loss, wan_block_loss(block, q, calib, pool));
      // Quantized chain: this block with its tuned weights on X_q feeds the next; X_fp takes
      // the targets.
      QS_RETURN_IF_ERROR(wan_block_output(block, q, calib, x_fp.data(), pool));
      std::swap(x_q, x_fp);
      std::swap(x_fp, targets);
      for (int j = 0; j < kWanLinears; ++j) {
        if (tuned.weights[j]) {
          model.weights.emplace(prefix + wan_linear_name(j), std::move(*tuned.weights[j]));
        }
      }
      report.done = true;
      report.seconds = seconds_since(block_start);
      report.elapsed = seconds_since(tune_start);
      model.blocks.push_back(report);
    }
    out.models.push_back(std::move(model));
  }
  return out;
}

}  // namespace qs::quant
