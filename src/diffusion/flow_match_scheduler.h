// diffusion: diffusers' FlowMatchEulerDiscreteScheduler as FLUX uses it: the sigma schedule
// (FluxPipeline's linspace(1, 1/N, N), shifted by mu, the "dynamic shift" that grows with the
// image's token count) and the Euler step of the flow ODE. Pure arithmetic, no model.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qs::diffusion {

// scheduler/scheduler_config.json (the fields FLUX.1 sets; others must keep their defaults).
struct FlowMatchConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;  // static shift, when use_dynamic_shifting is off
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
};

// Reads scheduler_config.json; options we do not implement (karras/exponential/beta sigmas,
// shift_terminal, stochastic sampling, invert_sigmas, a time_shift_type other than
// "exponential") are an error naming the field.
Result<FlowMatchConfig> read_flow_match_config(const std::string& path);

// FluxPipeline's calculate_shift: mu linear in the image token count between
// (base_image_seq_len, base_shift) and (max_image_seq_len, max_shift).
double flux_mu(const FlowMatchConfig& config, int64_t image_seq_len);

struct FlowMatchSchedule {
  std::vector<float> sigmas;     // [steps + 1], the last one 0
  std::vector<float> timesteps;  // [steps], sigma * num_train_timesteps
};

// set_timesteps(steps, sigmas=linspace(1, 1/steps, steps), mu): with dynamic shifting
// sigma' = e^mu / (e^mu + 1/sigma - 1), else shift * sigma / (1 + (shift - 1) * sigma).
FlowMatchSchedule flux_schedule(const FlowMatchConfig& config, int64_t steps, double mu);

// One Euler step, in place: sample += (sigmas[i + 1] - sigmas[i]) * velocity.
void flow_match_step(const FlowMatchSchedule& schedule, int64_t i, const float* velocity, int64_t n,
                     float* sample);

}  // namespace qs::diffusion
