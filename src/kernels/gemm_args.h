// kernels: the arguments of the plain f32 GEMM C[m, n] (+)= A[m, k] * B[k, n] that
// backpropagation needs besides x * W^T (quant/: dY * W for input gradients, dY^T * X for
// weight gradients). A is read through two strides so that a transposed operand costs no copy;
// B may be too (b_col_stride), which the kernels that pack B read directly (the bf16-product
// GEMM takes x * W^T as A = x, B(p, j) = W[j, p]) and ops::gemm copies for the others.
#pragma once

#include <cstdint>

namespace qs::kernels {

struct GemmArgs {
  const float* a;  // A(i, p) = a[i * a_row_stride + p * a_col_stride], [m, k]
  int64_t a_row_stride;
  int64_t a_col_stride;
  const float* b;  // B(p, j) = b[p * ldb + j * b_col_stride], [k, n]
  int64_t ldb;
  float* c;  // C(i, j) = c[i * ldc + j], [m, n]
  int64_t ldc;
  int64_t m, n, k;
  bool accumulate;  // C += A * B instead of C = A * B
  int64_t b_col_stride = 1;
};

}  // namespace qs::kernels
