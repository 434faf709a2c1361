// kernels/cpu: OPT-RTN's error sums (kernels/ref/scale_search_ref.h) on AVX-512. Vectorised
// across candidate scales, one per lane, while each lane walks the inputs in order: every
// candidate's sum is the scalar one bit for bit (same operations, same order, no contraction),
// so the search picks exactly the scales the scalar search picks.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

#if QS_X86  // the kernels are AVX-512 ones (CMakeLists.txt)
namespace qs::kernels::cpu {

void scale_search_errors_avx512(const float* w, const float* imat, int64_t count,
                                const float* scales, int64_t n_scales, int half, double* errors);

// kernels/ref/scale_search_ref.h's scale_candidates, eight at a time: the same double
// operations (IEEE division in every lane), then F16C's round trip, which rounds to nearest
// even as f32_to_f16 does, so every candidate is the scalar one bit for bit.
void scale_candidates_avx512(float gmax, int half, double step, int imax, float* out);

}  // namespace qs::kernels::cpu
#endif  // QS_X86
