// ops: linear front end. Checks the weight once, picks the kernel for the active ISA
// (kernels/cpu/isa.h) and the shape (GEMV for decode-sized m, GEMM otherwise), and splits
// the output columns over the pool so that every thread streams its own rows of w.
#include "ops/linear.h"

#include <cstdlib>
#include <memory>

#include "core/check.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/ref/qlinear_ref.h"

namespace qs::ops {
namespace {

using LinearKernel = void (*)(const kernels::cpu::LinearArgs&, int64_t, int64_t);

// The GEMM packs weight panels once per call; it pays off only for many rows of x.
bool use_gemm(kernels::Isa isa, int64_t m) {
  return m >= (isa == kernels::Isa::kAvx512 ? kernels::cpu::kGemmMinRowsAvx512
                                            : kernels::cpu::kGemmMinRowsAvx2);
}

LinearKernel choose_kernel(kernels::Isa isa, int64_t m) {
  const bool gemm = use_gemm(isa, m);
  switch (isa) {
    case kernels::Isa::kAvx512:
      return gemm ? kernels::cpu::linear_gemm_avx512 : kernels::cpu::linear_gemv_avx512;
    case kernels::Isa::kAvx2:
      return gemm ? kernels::cpu::linear_gemm_avx2 : kernels::cpu::linear_gemv_avx2;
    case kernels::Isa::kRef:
      return nullptr;
  }
  return nullptr;
}

// Below ~32K multiply-adds (a few microseconds) waking the other threads costs more than it
// saves: tiny models (stories260K) decode several times faster inline.
constexpr int64_t kMinParallelMacs = int64_t{1} << 15;

using QLinearKernel = void (*)(const kernels::cpu::QLinearArgs&, int64_t, int64_t);
using QuantizeActs = kernels::QActsView (*)(const kernels::QMatrixView&, const float*, int64_t,
                                            void*);

// The int8 activations of one call live in a per-thread buffer that only grows, so decode
// allocates nothing after its first token.
void* acts_scratch(size_t bytes) {
  struct Scratch {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  thread_local Scratch scratch;
  if (scratch.bytes < bytes) {
    const size_t want = (bytes + 63) / 64 * 64;
    scratch.data.reset(std::aligned_alloc(64, want));
    QS_CHECK(scratch.data != nullptr);
    scratch.bytes = want;
  }
  return scratch.data.get();
}

Status linear_packed(kernels::Isa isa, const float* x, int64_t m, const QuantMatrix& q,
                     const float* bias, float* y, ThreadPool& pool) {
  const kernels::QMatrixView& w = q.view();
  const int64_t n = w.n;
  const bool gemm = m >= kernels::cpu::kQGemmMinRows;
  QuantizeActs quantize = kernels::quantize_acts;
  QLinearKernel kernel = nullptr;
  switch (isa) {
    case kernels::Isa::kAvx512:
      quantize = kernels::cpu::quantize_acts_avx512;
      kernel = gemm ? kernels::cpu::qlinear_gemm_avx512 : kernels::cpu::qlinear_gemv_avx512;
      break;
    case kernels::Isa::kAvx2:
      quantize = kernels::cpu::quantize_acts_avx2;
      kernel = gemm ? kernels::cpu::qlinear_gemm_avx2 : kernels::cpu::qlinear_gemv_avx2;
      break;
    case kernels::Isa::kRef:
      break;
  }
  const kernels::QActsView a = quantize(w, x, m, acts_scratch(kernels::qacts_bytes(w, m)));
  if (kernel == nullptr) {
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      kernels::ref::qlinear_int8(w, a, begin, end, y);
      if (bias != nullptr) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = begin; j < end; ++j) y[i * n + j] += bias[j];
      }
    });
    return ok_status();
  }
  const kernels::cpu::QLinearArgs args{&w, &a, bias, y};
  if (m * n * w.k < kMinParallelMacs) {
    kernel(args, 0, n);
    return ok_status();
  }
  // The GEMM's 32-column panels stay whole; the GEMV's 16-column grain keeps two threads off
  // the same 64-byte line of y.
  const int64_t grain = gemm ? 32 : 16;
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end) { kernel(args, begin, end); }, grain);
  return ok_status();
}

}  // namespace

Status linear(const float* x, int64_t m, const Tensor& w, const float* bias, float* y,
              ThreadPool& pool) {
  return linear_with_isa(kernels::active_isa(), x, m, w, bias, y, pool);
}

Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const Tensor& w,
                       const float* bias, float* y, ThreadPool& pool) {
  if (!kernels::isa_supported(isa)) {
    return unimplemented(std::string("linear: this CPU cannot run the ") + kernels::isa_name(isa) +
                         " kernels");
  }
  if (w.rank() != 2) {
    return invalid_argument("linear: weight must be 2-d [n, k], got " + shape_string(w.shape));
  }
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return unimplemented(std::string("linear: no kernel for weight dtype ") + dtype_name(w.dtype));
  }
  if (m < 0) return invalid_argument("linear: negative row count " + std::to_string(m));
  const int64_t n = w.dim(0), k = w.dim(1);
  if (m == 0 || n == 0) return ok_status();
  if (k == 0) {
    // An empty sum: y is the bias (or zero). The kernels assume k >= 1.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] = bias != nullptr ? bias[j] : 0.0f;
    return ok_status();
  }

  const LinearKernel kernel = choose_kernel(isa, m);
  if (kernel == nullptr) {
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      kernels::ref::linear(x, m, k, w.data, w.dtype, n, begin, end, y);
      if (bias != nullptr) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = begin; j < end; ++j) y[i * n + j] += bias[j];
      }
    });
    return ok_status();
  }
  const kernels::cpu::LinearArgs args{x, m, k, w.data, w.dtype, n, bias, y};
  if (m * n * k < kMinParallelMacs) {
    kernel(args, 0, n);
    return ok_status();
  }
  // Whole GEMM panels per thread; for the GEMV a 16-column grain keeps two threads off the
  // same 64-byte line of y.
  const int64_t grain = use_gemm(isa, m) ? kernels::cpu::kColumnGrain : 16;
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end) { kernel(args, begin, end); }, grain);
  return ok_status();
}

std::string LinearWeight::kernel() const {
  if (quant) return quant->kernel();
  return std::string(dtype_name(dense.dtype)) + " (" + kernels::isa_name(kernels::active_isa()) +
         ")";
}

Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y,
              ThreadPool& pool) {
  return linear_with_isa(kernels::active_isa(), x, m, w, bias, y, pool);
}

Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const LinearWeight& w,
                       const float* bias, float* y, ThreadPool& pool) {
  if (w.quant == nullptr) return linear_with_isa(isa, x, m, w.dense, bias, y, pool);
  const QuantMatrix& q = *w.quant;
  if (!q.packed()) return linear_with_isa(isa, x, m, q.fallback(), bias, y, pool);
  if (!kernels::isa_supported(isa)) {
    return unimplemented(std::string("linear: this CPU cannot run the ") + kernels::isa_name(isa) +
                         " kernels");
  }
  if (m < 0) return invalid_argument("linear: negative row count " + std::to_string(m));
  // QuantMatrix::make admits no empty weight, so only m can make the call empty.
  if (m == 0) return ok_status();
  return linear_packed(isa, x, m, q, bias, y, pool);
}

}  // namespace qs::ops
