// diffusion: FlowMatchEulerDiscrete (see flow_match_scheduler.h). diffusers computes the
// schedule in numpy float32 (sigmas cast to float32 before the shift); so does this file.
#include "diffusion/flow_match_scheduler.h"

#include <cmath>

#include "core/json.h"
#include "io/checkpoint.h"

namespace qs::diffusion {

Result<FlowMatchConfig> read_flow_match_config(const std::string& path) {
  QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(path));
  if (!j.is_object()) return invalid_argument(path + ": not a JSON object");
  FlowMatchConfig c;
  auto num = [&](const char* key, auto* out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return ok_status();
    if (!j[key].is_number()) return invalid_argument(path + ": '" + key + "' is not a number");
    *out = j[key].get<std::remove_reference_t<decltype(*out)>>();
    return ok_status();
  };
  QS_RETURN_IF_ERROR(num("num_train_timesteps", &c.num_train_timesteps));
  QS_RETURN_IF_ERROR(num("shift", &c.shift));
  QS_RETURN_IF_ERROR(num("base_shift", &c.base_shift));
  QS_RETURN_IF_ERROR(num("max_shift", &c.max_shift));
  QS_RETURN_IF_ERROR(num("base_image_seq_len", &c.base_image_seq_len));
  QS_RETURN_IF_ERROR(num("max_image_seq_len", &c.max_image_seq_len));
  if (j.contains("use_dynamic_shifting")) {
    if (!j["use_dynamic_shifting"].is_boolean()) {
      return invalid_argument(path + ": 'use_dynamic_shifting' is not a boolean");
    }
    c.use_dynamic_shifting = j["use_dynamic_shifting"].get<bool>();
  }
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                          "stochastic_sampling", "invert_sigmas"}) {
    if (j.contains(key) && !(j[key].is_boolean() && !j[key].get<bool>())) {
      return unimplemented(path + ": '" + key + "' is not supported (only false)");
    }
  }
  if (j.contains("shift_terminal") && !j["shift_terminal"].is_null()) {
    return unimplemented(path + ": 'shift_terminal' is not supported (only null)");
  }
  if (j.contains("time_shift_type") && j["time_shift_type"] != "exponential") {
    return unimplemented(path + ": 'time_shift_type' " + j["time_shift_type"].dump() +
                         " is not supported (only \"exponential\")");
  }
  if (c.num_train_timesteps <= 0 || c.max_image_seq_len == c.base_image_seq_len || !(c.shift > 0)) {
    return invalid_argument(path +
                            ": num_train_timesteps, shift or the image_seq_len range is "
                            "out of range");
  }
  return c;
}

double flux_mu(const FlowMatchConfig& config, int64_t image_seq_len) {
  const double m = (config.max_shift - config.base_shift) /
                   static_cast<double>(config.max_image_seq_len - config.base_image_seq_len);
  const double b = config.base_shift - m * static_cast<double>(config.base_image_seq_len);
  return static_cast<double>(image_seq_len) * m + b;
}

FlowMatchSchedule flux_schedule(const FlowMatchConfig& config, int64_t steps, double mu) {
  FlowMatchSchedule s;
  const float e_mu = static_cast<float>(std::exp(mu));
  for (int64_t i = 0; i < steps; ++i) {
    // np.linspace(1.0, 1 / steps, steps) in float64, then cast to float32.
    const double stop = 1.0 / static_cast<double>(steps);
    const double lin =
        i == steps - 1
            ? stop
            : static_cast<double>(i) * ((stop - 1.0) / static_cast<double>(steps - 1)) + 1.0;
    const float sigma = static_cast<float>(lin);
    float shifted;
    if (config.use_dynamic_shifting) {
      shifted = e_mu / (e_mu + (1.0f / sigma - 1.0f));
    } else {
      const float shift = static_cast<float>(config.shift);
      shifted = shift * sigma / (1.0f + (shift - 1.0f) * sigma);
    }
    s.sigmas.push_back(shifted);
    s.timesteps.push_back(shifted * static_cast<float>(config.num_train_timesteps));
  }
  s.sigmas.push_back(0.0f);
  return s;
}

void flow_match_step(const FlowMatchSchedule& schedule, int64_t i, const float* velocity, int64_t n,
                     float* sample) {
  const float dt = schedule.sigmas[i + 1] - schedule.sigmas[i];
  for (int64_t j = 0; j < n; ++j) sample[j] += dt * velocity[j];
}

}  // namespace qs::diffusion
