// quant: AutoRound (SignRound, autoround.md §1.4) of Wan2.2 transformers (issue 33): the blocks
// of each expert tuned one by one on calibration prompts run through the Wan pipeline, as
// auto-round's diffusion path does (its compressors/diffusion_mixin.py: every transformer call
// of a few denoising steps is a sample, each expert calibrated on the steps it runs). Losses,
// chains and the best snapshot as block_tuner.h; the block is wan_block.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "quant/block_tuner.h"
#include "quant/pipeline.h"
#include "quant/wan_block.h"

namespace qs::quant {

// Calibration data of one Wan block, f32: inputs and targets [n_samples, seq, dim] (X_q and the
// FP block's outputs on X_fp), and each sample's conditioning (timestep, text, rope tables).
// Every position counts in the loss (a video has no padding).
struct WanBlockCalibration {
  const float* inputs = nullptr;
  const float* targets = nullptr;
  std::vector<WanConditioning<float>> conditioning;  // [n_samples]
  int64_t n_samples = 0;
  int64_t seq = 0;
};

// tune_block for a Wan block: signsgd_tune over samples run one at a time (auto-round's
// diffusion path tunes with batch_size 1 and accumulates batch_size samples per step, which is
// the same mean over the global batch).
Result<TuneResult> tune_wan_block(const WanBlockTensors<float>& block,
                                  const PerLinear<formats::QuantScheme>& schemes,
                                  const WanBlockCalibration& calib, const TuneOptions& options,
                                  ThreadPool& pool, const TuneProgress& progress = {});

// The block's output on calib.inputs with linear i replaced by dequantize(*weights[i]) (nullptr:
// full precision): out [n_samples, seq, dim].
Status wan_block_output(const WanBlockTensors<float>& block,
                        const PerLinear<const formats::QuantizedWeight*>& weights,
                        const WanBlockCalibration& calib, float* out, ThreadPool& pool);

// The mean squared error of that output against calib.targets over every sample.
Result<double> wan_block_loss(const WanBlockTensors<float>& block,
                              const PerLinear<const formats::QuantizedWeight*>& weights,
                              const WanBlockCalibration& calib, ThreadPool& pool);

// How the calibration prompts are run through the pipeline. auto-round's diffusion defaults are
// calib_num_inference_steps 8 and guidance_scale 7.5 (each CFG branch a sample); it renders at
// the pipeline's default size, which a CPU cannot afford for tuning (attention is quadratic in
// the 3-D patch tokens), so the video is small: a few latent frames of a few patches.
struct WanCalibrationSettings {
  int64_t steps = 8;
  double guidance_scale = 7.5;
  int64_t num_frames = 9;        // 3 latent frames
  int64_t patches_per_side = 4;  // width = height = this x the pipeline's spatial multiple
  int64_t max_sequence_length = 512;
};

// The built-in calibration prompts (used when --dataset is empty), or --dataset's lines.
Result<std::vector<std::string>> wan_calibration_prompts(const std::string& dataset,
                                                         int64_t nsamples);

// For each of `names` (the pipeline's transformer directories, in order) with its plan: runs
// the prompts through the pipeline in o.model_dir capturing every call's first-block input and
// conditioning, then tunes (o.iters > 0) each block's planned linears of that transformer on
// the calls it served, chaining both the full-precision and the quantized activations. The
// reports' losses are over the whole calibration set of the block: initial_loss with RTN
// weights, best_loss with the tuned ones, both on the quantized chain's inputs.
struct WanTuned {
  std::vector<TunedModel> models;  // per transformer, in `names` order
  std::string calibration;
};
Result<WanTuned> tune_wan_pipeline(const QuantizeOptions& o, const std::vector<std::string>& names,
                                   const std::vector<const QuantPlan*>& plans,
                                   const WanCalibrationSettings& settings,
                                   const std::function<bool()>& cancelled);

}  // namespace qs::quant
