// ops: OPT-RTN's error sums, dispatched (scale_search.h).
#include "ops/scale_search.h"

#include "core/check.h"
#include "kernels/cpu/scale_search_cpu.h"
#include "kernels/ref/scale_search_ref.h"

namespace qs::ops {

void scale_search_errors_with_isa(kernels::Isa isa, const float* w, const float* imat,
                                  int64_t count, const float* scales, int64_t n_scales, int half,
                                  double* errors) {
  QS_CHECK(kernels::isa_supported(isa));
#if QS_X86
  if (isa == kernels::Isa::kAvx512) {
    kernels::cpu::scale_search_errors_avx512(w, imat, count, scales, n_scales, half, errors);
    return;
  }
#endif
  kernels::ref::scale_search_errors(w, imat, count, scales, n_scales, half, errors);
}

void scale_search_errors(const float* w, const float* imat, int64_t count, const float* scales,
                         int64_t n_scales, int half, double* errors) {
  scale_search_errors_with_isa(kernels::active_isa(), w, imat, count, scales, n_scales, half,
                               errors);
}

void scale_candidates_with_isa(kernels::Isa isa, float gmax, int half, double step, int imax,
                               float* out) {
  QS_CHECK(kernels::isa_supported(isa));
#if QS_X86
  if (isa == kernels::Isa::kAvx512) {
    kernels::cpu::scale_candidates_avx512(gmax, half, step, imax, out);
    return;
  }
#endif
  kernels::ref::scale_candidates(gmax, half, step, imax, out);
}

void scale_candidates(float gmax, int half, double step, int imax, float* out) {
  scale_candidates_with_isa(kernels::active_isa(), gmax, half, step, imax, out);
}

}  // namespace qs::ops
