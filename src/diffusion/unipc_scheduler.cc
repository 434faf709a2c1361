// diffusion: UniPCMultistepScheduler (see unipc_scheduler.h). diffusers builds the schedule in
// numpy float64 and casts the sigmas to float32; every step then works on 0-dim float32
// tensors (log-SNRs, h, the rks, the B(h) coefficients, the small linear solves) and float32
// samples. This file keeps each of those operations in the same precision and order. What
// still differs: torch's log and expm1 are SLEEF's (1 ulp from libm's for some arguments) and
// MKL's solve rounds differently from the textbook LU here; a 40-step loop ends a few ulps
// from diffusers (tests/golden/unipc_scheduler_test.cc states the bound).
#include "diffusion/unipc_scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/json.h"

namespace qs::diffusion {

namespace {

// diffusers allows any order; past 3 the Vandermonde-like systems grow ill-conditioned and no
// pipeline uses them. The bound keeps a hostile config from allocating a huge history.
constexpr int64_t kMaxSolverOrder = 8;
constexpr int64_t kMaxSteps = 1000000;

using SolverType = UniPCConfig::SolverType;
using FinalSigma = UniPCConfig::FinalSigma;

Status check_config(const UniPCConfig& c, const std::string& source) {
  QS_RETURN_IF_ERROR(
      json_check_range(c.num_train_timesteps, 1, 1000000000, "num_train_timesteps", source));
  QS_RETURN_IF_ERROR(json_check_range(c.solver_order, 1, kMaxSolverOrder, "solver_order", source));
  if (!std::isfinite(c.flow_shift) || !(c.flow_shift > 0)) {
    return invalid_argument(source + ": 'flow_shift' must be a positive number, found " +
                            std::to_string(c.flow_shift));
  }
  // The last step runs to sigma 0, where log(sigma) = -inf makes h infinite: bh1's B(h) = -inf
  // then multiplies a zero correction (NaN), and a predictor of order >= 2 divides by an rk of
  // 0. diffusers 0.42 returns NaN/inf or fails its solve there; we refuse the configuration.
  // With "sigma_min" the last step has h = 0 instead, where a solve (order >= 3) is singular.
  if (c.final_sigmas_type == FinalSigma::kZero && c.solver_type == SolverType::kBh1) {
    return unimplemented(source +
                         ": 'solver_type' \"bh1\" with 'final_sigmas_type' \"zero\" is not "
                         "supported (diffusers' last step is NaN there); use bh2 or sigma_min");
  }
  if (!c.lower_order_final &&
      (c.solver_order > 2 || (c.solver_order == 2 && c.final_sigmas_type == FinalSigma::kZero))) {
    return unimplemented(source +
                         ": 'lower_order_final' false is supported only with solver_order 1, or "
                         "2 and 'final_sigmas_type' \"sigma_min\" (diffusers' last step is not "
                         "finite otherwise)");
  }
  return ok_status();
}

// log(alpha) - log(sigma) with alpha = 1 - sigma: the half log-SNR of the flow schedule, from a
// float32 sigma in float32, as diffusers computes it on 0-dim tensors.
float lambda_of(float sigma) {
  const float alpha = 1.0f - sigma;
  return std::log(alpha) - std::log(sigma);
}

// torch.pow(rks, e): PyTorch fills 1 for e = 0, copies for 1, multiplies for 2 and 3.
float int_pow(float x, int64_t e) {
  switch (e) {
    case 0:
      return 1.0f;
    case 1:
      return x;
    case 2:
      return x * x;
    case 3:
      return x * x * x;
    default:
      return std::pow(x, static_cast<float>(e));
  }
}

// torch.linalg.solve(A, b) in float32 for the leading n x n block of the row-major `stride`-wide
// `a`, in reference LAPACK's order: getrf (partial pivoting, the column scaled by the pivot's
// reciprocal), getrs (column-oriented triangular solves). The n unknowns, or an error when
// singular (diffusers raises there too).
Result<std::vector<float>> solve(std::vector<float> a, int64_t stride, std::vector<float> b,
                                 int64_t n) {
  auto at = [&](int64_t i, int64_t k) -> float& { return a[i * stride + k]; };
  std::vector<int64_t> pivot(n);
  for (int64_t j = 0; j < n; ++j) {
    int64_t p = j;
    for (int64_t i = j + 1; i < n; ++i) {
      if (std::fabs(at(i, j)) > std::fabs(at(p, j))) p = i;
    }
    pivot[j] = p;
    if (at(p, j) == 0.0f || !std::isfinite(at(p, j))) {
      return internal_error("UniPC: the B(h) system is singular (order " + std::to_string(n) + ")");
    }
    if (p != j) {
      for (int64_t k = 0; k < n; ++k) std::swap(at(p, k), at(j, k));
    }
    const float inv = 1.0f / at(j, j);
    for (int64_t i = j + 1; i < n; ++i) at(i, j) *= inv;
    for (int64_t k = j + 1; k < n; ++k) {
      for (int64_t i = j + 1; i < n; ++i) at(i, k) -= at(i, j) * at(j, k);
    }
  }
  for (int64_t j = 0; j < n; ++j) std::swap(b[j], b[pivot[j]]);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t i = k + 1; i < n; ++i) b[i] -= b[k] * at(i, k);
  }
  for (int64_t k = n - 1; k >= 0; --k) {
    b[k] /= at(k, k);
    for (int64_t i = 0; i < k; ++i) b[i] -= b[k] * at(i, k);
  }
  b.resize(n);
  return b;
}

// What multistep_uni_p_bh_update and multistep_uni_c_bh_update compute before touching the
// sample: the step from sigma_s0 to sigma_t in log-SNR h, the ratios rk of the older points'
// log-SNR offsets to h, and the weights rho of the B(h) system R rho = b (UniPC paper, eq. 8
// and Algorithm 2).
struct BhTerms {
  float alpha_t = 0;        // 1 - sigma_t
  float sigma_ratio = 0;    // sigma_t / sigma_s0
  float h_phi_1 = 0;        // e^{-h} - 1 (predict_x0: the exponent is -h)
  float b_h = 0;            // bh1: -h, bh2: e^{-h} - 1
  std::vector<float> rks;   // [order]: one per older point, then 1
  std::vector<float> rhos;  // UniC: [order], UniP: [order - 1]
};

// `older[k]` is the sigma of the (k + 1)-th point before s0, k < order - 1.
Result<BhTerms> bh_terms(float sigma_t, float sigma_s0, const std::vector<float>& older,
                         int64_t order, SolverType type, bool corrector) {
  BhTerms t;
  t.alpha_t = 1.0f - sigma_t;
  t.sigma_ratio = sigma_t / sigma_s0;
  const float lambda_s0 = lambda_of(sigma_s0);
  const float h = lambda_of(sigma_t) - lambda_s0;
  for (float s : older) t.rks.push_back((lambda_of(s) - lambda_s0) / h);
  t.rks.push_back(1.0f);
  const float hh = -h;
  t.h_phi_1 = std::expm1(hh);
  float h_phi_k = t.h_phi_1 / hh - 1.0f;
  t.b_h = type == SolverType::kBh1 ? hh : std::expm1(hh);
  // Python's int factorial and float 1/factorial, each cast to float32 where it meets a tensor.
  std::vector<float> r, b;  // [order, order] row-major with r[i][k] = rks[k]^i, and [order]
  int64_t factorial = 1;
  for (int64_t i = 1; i <= order; ++i) {
    for (int64_t k = 0; k < order; ++k) r.push_back(int_pow(t.rks[k], i - 1));
    b.push_back(h_phi_k * static_cast<float>(factorial) / t.b_h);
    factorial *= i + 1;
    h_phi_k = h_phi_k / hh - static_cast<float>(1.0 / static_cast<double>(factorial));
  }
  // UniC solves all `order` rows (order 1: diffusers' fixed 0.5); UniP the first order - 1
  // (order 2: the same fixed 0.5; order 1 needs none).
  if (corrector ? order == 1 : order == 2) {
    t.rhos = {0.5f};
  } else if (corrector || order > 2) {
    QS_ASSIGN_OR_RETURN(t.rhos,
                        solve(std::move(r), order, std::move(b), corrector ? order : order - 1));
  }
  return t;
}

}  // namespace

Result<UniPCConfig> read_unipc_config(const std::string& path) {
  QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(path));
  if (!j.is_object()) return invalid_argument(path + ": not a JSON object");
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto string_of = [&](const char* key, const char* fallback) -> Result<std::string> {
    if (!present(key)) return std::string(fallback);
    if (!j[key].is_string()) return invalid_argument(path + ": '" + key + "' is not a string");
    return j[key].get<std::string>();
  };
  auto bool_of = [&](const char* key, bool fallback) -> Result<bool> {
    if (!present(key)) return fallback;
    if (!j[key].is_boolean()) return invalid_argument(path + ": '" + key + "' is not a boolean");
    return j[key].get<bool>();
  };
  auto one_of = [&](const char* key, const std::string& value,
                    std::initializer_list<const char*> allowed) -> Status {
    if (std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return value == a; })) {
      return ok_status();
    }
    std::string names;
    for (const char* a : allowed) names += std::string(names.empty() ? "" : ", ") + a;
    return invalid_argument(path + ": '" + key + "' is \"" + value + "\", expected one of " +
                            names);
  };

  UniPCConfig c;
  QS_ASSIGN_OR_RETURN(std::string prediction_type, string_of("prediction_type", "epsilon"));
  if (prediction_type != "flow_prediction") {
    return unimplemented(path + ": 'prediction_type' \"" + prediction_type +
                         "\" is not supported: only \"flow_prediction\" (Wan); epsilon, sample "
                         "and v_prediction are not needed by any pipeline yet");
  }
  QS_ASSIGN_OR_RETURN(bool use_flow_sigmas, bool_of("use_flow_sigmas", false));
  if (!use_flow_sigmas) {
    return unimplemented(path +
                         ": 'use_flow_sigmas' false is not supported (only the flow "
                         "sigmas of flow_prediction)");
  }
  QS_ASSIGN_OR_RETURN(bool predict_x0, bool_of("predict_x0", true));
  if (!predict_x0) {
    return unimplemented(path +
                         ": 'predict_x0' false is not supported (diffusers has no "
                         "flow_prediction without it)");
  }
  for (const char* key : {"thresholding", "use_karras_sigmas", "use_exponential_sigmas",
                          "use_beta_sigmas", "use_dynamic_shifting"}) {
    QS_ASSIGN_OR_RETURN(bool on, bool_of(key, false));
    if (on) return unimplemented(path + ": '" + key + "' is not supported (only false)");
  }
  // diffusers tests `if shift_terminal:`, so 0 is off like null.
  if (present("shift_terminal") &&
      !(j["shift_terminal"].is_number() && j["shift_terminal"].get<double>() == 0.0)) {
    return unimplemented(path + ": 'shift_terminal' is not supported (only null)");
  }
  if (present("solver_p")) {
    return unimplemented(path + ": 'solver_p' is not supported (only null: UniP predicts)");
  }

  QS_ASSIGN_OR_RETURN(auto num_train_timesteps, json_integral(j, "num_train_timesteps", path));
  if (num_train_timesteps) c.num_train_timesteps = *num_train_timesteps;
  QS_ASSIGN_OR_RETURN(auto solver_order, json_integral(j, "solver_order", path));
  if (solver_order) c.solver_order = *solver_order;
  if (present("flow_shift")) {
    if (!j["flow_shift"].is_number()) {
      return invalid_argument(path + ": 'flow_shift' is not a number");
    }
    c.flow_shift = j["flow_shift"].get<double>();
  }
  QS_ASSIGN_OR_RETURN(std::string solver_type, string_of("solver_type", "bh2"));
  // diffusers' constructor re-registers the older names as bh2.
  QS_RETURN_IF_ERROR(
      one_of("solver_type", solver_type, {"bh1", "bh2", "midpoint", "heun", "logrho"}));
  c.solver_type = solver_type == "bh1" ? SolverType::kBh1 : SolverType::kBh2;
  QS_ASSIGN_OR_RETURN(c.lower_order_final, bool_of("lower_order_final", true));
  if (present("disable_corrector")) {
    const auto& list = j["disable_corrector"];
    if (!list.is_array()) {
      return invalid_argument(path + ": 'disable_corrector' is not a list of step indices");
    }
    for (const auto& v : list) {
      // Each element through the integer reader, wrapped so that its error names the field.
      QS_ASSIGN_OR_RETURN(auto index, json_integral(nlohmann::json{{"disable_corrector", v}},
                                                    "disable_corrector", path));
      if (!index) {
        return invalid_argument(path + ": 'disable_corrector' holds a null, not a step index");
      }
      c.disable_corrector.push_back(*index);
    }
  }
  QS_ASSIGN_OR_RETURN(std::string final_sigmas_type, string_of("final_sigmas_type", "zero"));
  QS_RETURN_IF_ERROR(one_of("final_sigmas_type", final_sigmas_type, {"zero", "sigma_min"}));
  c.final_sigmas_type = final_sigmas_type == "zero" ? FinalSigma::kZero : FinalSigma::kSigmaMin;
  // Inert with flow sigmas, but diffusers refuses other values, so a file holding one is broken.
  QS_ASSIGN_OR_RETURN(std::string spacing, string_of("timestep_spacing", "linspace"));
  QS_RETURN_IF_ERROR(one_of("timestep_spacing", spacing, {"linspace", "leading", "trailing"}));
  QS_ASSIGN_OR_RETURN(std::string beta_schedule, string_of("beta_schedule", "linear"));
  QS_RETURN_IF_ERROR(
      one_of("beta_schedule", beta_schedule, {"linear", "scaled_linear", "squaredcos_cap_v2"}));
  QS_RETURN_IF_ERROR(check_config(c, path));
  return c;
}

Status UniPCScheduler::set_timesteps(int64_t steps) {
  QS_RETURN_IF_ERROR(check_config(config_, "UniPCScheduler"));
  if (steps < 1 || steps > kMaxSteps) {
    return invalid_argument("UniPCScheduler::set_timesteps: steps is " + std::to_string(steps) +
                            ", expected 1 to " + std::to_string(kMaxSteps));
  }
  // numpy's linspace(1, 1 / N, steps + 1): i * ((stop - start) / steps) + start, last dropped.
  const double n_train = static_cast<double>(config_.num_train_timesteps);
  const double delta = 1.0 / n_train - 1.0;
  const double increment = delta / static_cast<double>(steps);
  const double shift = config_.flow_shift;
  std::vector<double> shifted(steps);
  for (int64_t i = 0; i < steps; ++i) {
    const double lin = static_cast<double>(i) * increment + 1.0;
    shifted[i] = shift * lin / (1.0 + (shift - 1.0) * lin);
  }
  // diffusers: keeps log(alpha = 1 - sigma) finite in the first updates.
  constexpr double kEps = 1e-6;
  if (std::fabs(shifted[0] - 1.0) < kEps) shifted[0] -= kEps;
  timesteps_.resize(steps);
  sigmas_.resize(steps + 1);
  for (int64_t i = 0; i < steps; ++i) {
    // torch's .to(int64) truncates, as a C++ cast does.
    timesteps_[i] = static_cast<int64_t>(shifted[i] * n_train);
    sigmas_[i] = static_cast<float>(shifted[i]);
  }
  sigmas_[steps] =
      config_.final_sigmas_type == FinalSigma::kZero ? 0.0f : static_cast<float>(shifted.back());
  step_index_ = 0;
  n_ = 0;
  model_outputs_.assign(config_.solver_order, {});
  last_sample_.clear();
  this_order_ = 0;
  lower_order_nums_ = 0;
  return ok_status();
}

Status UniPCScheduler::step(const float* model_output, float* sample, int64_t n) {
  const int64_t steps = static_cast<int64_t>(timesteps_.size());
  if (steps == 0) return invalid_argument("UniPCScheduler::step: set_timesteps was not called");
  if (step_index_ >= steps) {
    return out_of_range("UniPCScheduler::step: all " + std::to_string(steps) +
                        " steps are taken; call set_timesteps for another loop");
  }
  if (n <= 0 || (n_ != 0 && n != n_)) {
    return invalid_argument("UniPCScheduler::step: " + std::to_string(n) + " elements, expected " +
                            (n_ != 0 ? std::to_string(n_) : std::string("a positive count")));
  }
  const int64_t i = step_index_;
  const int64_t order_max = config_.solver_order;
  const SolverType type = config_.solver_type;

  // The coefficients first: they are all that can fail, so an error changes no state.
  const bool disabled =
      std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(), i - 1) !=
      config_.disable_corrector.end();
  const bool use_corrector = i > 0 && !disabled && !last_sample_.empty();
  // UniC of the last step's order re-solves that step from last_sample_ with this x0 at its end.
  const int64_t order_c = this_order_;
  BhTerms unic;
  if (use_corrector) {
    std::vector<float> older;
    for (int64_t k = 1; k < order_c; ++k) older.push_back(sigmas_[i - (k + 1)]);
    QS_ASSIGN_OR_RETURN(unic, bh_terms(sigmas_[i], sigmas_[i - 1], older, order_c, type, true));
  }
  // UniP from sigmas_[i] to sigmas_[i + 1]: order 1 on the first step, one more per step up
  // to solver_order (the warm-up), and with lower_order_final no more than the steps left.
  const int64_t order_cap = config_.lower_order_final ? std::min(order_max, steps - i) : order_max;
  const int64_t order_p = std::min(order_cap, lower_order_nums_ + 1);
  BhTerms unip;
  {
    std::vector<float> older;
    for (int64_t k = 1; k < order_p; ++k) older.push_back(sigmas_[i - k]);
    QS_ASSIGN_OR_RETURN(unip, bh_terms(sigmas_[i + 1], sigmas_[i], older, order_p, type, false));
  }

  n_ = n;
  // The k-th newest x0 of the history, k = 0 the newest.
  auto history = [&](int64_t k) { return model_outputs_[order_max - 1 - k].data(); };
  // convert_model_output (flow_prediction, predict_x0): x0 = x - sigma * v.
  std::vector<float> x0(n);
  const float sigma = sigmas_[i];
  for (int64_t e = 0; e < n; ++e) x0[e] = sample[e] - sigma * model_output[e];

  if (use_corrector) {
    const float* m0 = history(0);
    std::vector<const float*> mk;  // [order_c - 1]
    for (int64_t k = 1; k < order_c; ++k) mk.push_back(history(k));
    const BhTerms& t = unic;
    const float c_x = t.sigma_ratio, c_m = t.alpha_t * t.h_phi_1, c_d = t.alpha_t * t.b_h;
    for (int64_t e = 0; e < n; ++e) {
      // diffusers' D1s = (m_k - m0) / r_k, contracted with rho by einsum.
      float corr = 0.0f;
      for (int64_t k = 1; k < order_c; ++k) {
        corr += t.rhos[k - 1] * ((mk[k - 1][e] - m0[e]) / t.rks[k - 1]);
      }
      const float x_t = c_x * last_sample_[e] - c_m * m0[e];
      sample[e] = x_t - c_d * (corr + t.rhos[order_c - 1] * (x0[e] - m0[e]));
    }
  }

  std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
  model_outputs_.back() = std::move(x0);
  this_order_ = order_p;
  last_sample_.assign(sample, sample + n);

  const float* m0 = history(0);
  std::vector<const float*> mk;  // [order_p - 1]
  for (int64_t k = 1; k < order_p; ++k) mk.push_back(history(k));
  const BhTerms& t = unip;
  const float c_x = t.sigma_ratio, c_m = t.alpha_t * t.h_phi_1, c_d = t.alpha_t * t.b_h;
  for (int64_t e = 0; e < n; ++e) {
    const float x_t = c_x * sample[e] - c_m * m0[e];
    if (order_p == 1) {
      sample[e] = x_t;  // diffusers subtracts B(h) times a zero correction
      continue;
    }
    float pred = 0.0f;
    for (int64_t k = 1; k < order_p; ++k) {
      pred += t.rhos[k - 1] * ((mk[k - 1][e] - m0[e]) / t.rks[k - 1]);
    }
    sample[e] = x_t - c_d * pred;
  }

  if (lower_order_nums_ < order_max) ++lower_order_nums_;
  ++step_index_;
  return ok_status();
}

}  // namespace qs::diffusion
