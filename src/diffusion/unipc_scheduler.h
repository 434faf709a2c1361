// diffusion: diffusers' UniPCMultistepScheduler as Wan2.1/2.2 use it: flow prediction on the
// shifted flow sigmas, the UniP predictor and UniC corrector (B(h) variants bh1/bh2) of any
// order, with diffusers' warm-up and lower-order final steps. Pure arithmetic, no model; the
// numbers follow diffusers 0.42 operation for operation (float32 where it uses float32).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace qs::diffusion {

// scheduler/scheduler_config.json, the fields that matter with use_flow_sigmas. The beta
// schedule (beta_*, trained_betas, rescale_betas_zero_snr), timestep_spacing and steps_offset
// only shape the discrete-time schedule that flow sigmas replace; they are checked, not kept.
struct UniPCConfig {
  enum class SolverType { kBh1, kBh2 };        // B(h) = h, or e^h - 1 (UniPC paper, section 3.2)
  enum class FinalSigma { kZero, kSigmaMin };  // the sigma after the last step: 0 or the last one

  int64_t num_train_timesteps = 1000;
  int64_t solver_order = 2;
  double flow_shift = 1.0;
  SolverType solver_type = SolverType::kBh2;
  bool lower_order_final = true;
  std::vector<int64_t> disable_corrector;  // step indices whose following step skips UniC
  FinalSigma final_sigmas_type = FinalSigma::kZero;
};

// Reads scheduler_config.json with diffusers' defaults for absent fields. Refused, naming the
// field: prediction_type other than "flow_prediction" (epsilon, sample and v_prediction are
// not needed by any pipeline here yet), use_flow_sigmas false, predict_x0 false, thresholding,
// karras/exponential/beta sigmas, use_dynamic_shifting (WanPipeline passes no mu),
// shift_terminal, solver_p; and the combinations where diffusers itself ends in NaN or a
// singular solve: bh1 with final_sigmas_type "zero", lower_order_final false with order > 2,
// or with order 2 and "zero".
Result<UniPCConfig> read_unipc_config(const std::string& path);

// The scheduler's state across one denoising loop: set_timesteps, then step() once per
// timestep in order (diffusers with set_begin_index(0), as WanPipeline does).
class UniPCScheduler {
 public:
  explicit UniPCScheduler(UniPCConfig config) : config_(std::move(config)) {}

  // diffusers' set_timesteps(steps): sigmas linspace(1, 1/num_train_timesteps, steps + 1)[:-1]
  // in float64, shifted by flow_shift, the first nudged to 1 - 1e-6 when it is within 1e-6 of 1,
  // then the final sigma; timesteps are sigma * num_train_timesteps truncated to int64 (what
  // WanPipeline passes to the transformer and compares with boundary_ratio * 1000). Resets
  // the history. steps outside [1, 1e6] is an error.
  Status set_timesteps(int64_t steps);

  const std::vector<float>& sigmas() const { return sigmas_; }          // [steps + 1], float32
  const std::vector<int64_t>& timesteps() const { return timesteps_; }  // [steps]
  const UniPCConfig& config() const { return config_; }
  // The index of the timestep the next step() takes (0 after set_timesteps).
  int64_t step_index() const { return step_index_; }

  // diffusers' step(model_output, timesteps()[step_index()], sample): converts the flow
  // prediction v to x0 = sample - sigma * v, corrects `sample` with UniC (from the second step
  // on), then moves it to the next sigma with UniP, in place. `n` elements each; every call
  // of one loop takes the same n. Errors: no set_timesteps, past the last step, n changed.
  Status step(const float* model_output, float* sample, int64_t n);

 private:
  UniPCConfig config_;
  std::vector<float> sigmas_;
  std::vector<int64_t> timesteps_;
  int64_t step_index_ = 0;
  int64_t n_ = 0;  // elements per sample, fixed by the loop's first step
  // diffusers' model_outputs: the converted x0 predictions, oldest first, newest at the back;
  // empty vectors until the warm-up fills them.
  std::vector<std::vector<float>> model_outputs_;
  std::vector<float> last_sample_;  // the sample the last predictor started from
  int64_t this_order_ = 0;          // the predictor order of the last step, the next UniC's
  int64_t lower_order_nums_ = 0;    // steps taken, up to solver_order: the warm-up counter
};

}  // namespace qs::diffusion
