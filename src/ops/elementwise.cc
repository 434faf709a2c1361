// ops: per-token ops, dispatched once per call to the SIMD kernels of the active ISA
// (kernels/cpu/elementwise_*.cc) or to the scalar oracle (kernels/ref/elementwise_ref.cc).
#include "ops/elementwise.h"

#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/elementwise_ref.h"

namespace qs::ops {

using kernels::Isa;

void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps, float* y) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::rms_norm_avx512(x, m, d, weight, eps, y);
    case Isa::kAvx2:
      return kernels::cpu::rms_norm_avx2(x, m, d, weight, eps, y);
    case Isa::kRef:
      return kernels::ref::rms_norm(x, m, d, weight, eps, y);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::silu_mul_avx512(gate, up, n, out);
    case Isa::kAvx2:
      return kernels::cpu::silu_mul_avx2(gate, up, n, out);
    case Isa::kRef:
      return kernels::ref::silu_mul(gate, up, n, out);
  }
}

void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const float* cos, const float* sin) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::rope_rotate_half_avx512(x, n_tokens, n_heads, head_dim, cos, sin);
    case Isa::kAvx2:
      return kernels::cpu::rope_rotate_half_avx2(x, n_tokens, n_heads, head_dim, cos, sin);
    case Isa::kRef:
      return kernels::ref::rope_rotate_half(x, n_tokens, n_heads, head_dim, cos, sin);
  }
}

void softmax(float* x, int64_t n) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::softmax_avx512(x, n);
    case Isa::kAvx2:
      return kernels::cpu::softmax_avx2(x, n);
    case Isa::kRef:
      return kernels::ref::softmax(x, n);
  }
}

float exp_sub(const float* x, int64_t n, float shift, float* out) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::exp_sub_avx512(x, n, shift, out);
    case Isa::kAvx2:
      return kernels::cpu::exp_sub_avx2(x, n, shift, out);
    case Isa::kRef:
      return kernels::ref::exp_sub(x, n, shift, out);
  }
  return 0.0f;
}

void add_inplace(float* y, const float* x, int64_t n) {
  switch (kernels::active_isa()) {
    case Isa::kAvx512:
      return kernels::cpu::add_inplace_avx512(y, x, n);
    case Isa::kAvx2:
      return kernels::cpu::add_inplace_avx2(y, x, n);
    case Isa::kRef:
      return kernels::ref::add_inplace(y, x, n);
  }
}

}  // namespace qs::ops
