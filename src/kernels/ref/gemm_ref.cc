// kernels/ref: scalar f32 GEMM.
#include "kernels/ref/gemm_ref.h"

#include "core/dtype.h"

namespace qs::kernels::ref {

void gemm_f32(const GemmArgs& g, int64_t i_begin, int64_t i_end) {
  for (int64_t i = i_begin; i < i_end; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g.k; ++p)
        acc += g.a[i * g.a_row_stride + p * g.a_col_stride] * g.b[p * g.ldb + j * g.b_col_stride];
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + acc : acc;
    }
  }
}

void gemm_bf16(const GemmArgs& g, int64_t i_begin, int64_t i_end) {
  auto r = [](float f) { return bf16_to_f32(f32_to_bf16(f)); };
  for (int64_t i = i_begin; i < i_end; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g.k; ++p)
        acc += r(g.a[i * g.a_row_stride + p * g.a_col_stride]) *
               r(g.b[p * g.ldb + j * g.b_col_stride]);
      float& c = g.c[i * g.ldc + j];
      c = g.accumulate ? c + acc : acc;
    }
  }
}

}  // namespace qs::kernels::ref
