// ops: linear layers. Validates shapes and dtypes once, then hands pointers to the fastest
// kernel this CPU has (kernels/cpu), or to the scalar reference (kernels/ref).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "ops/quant_matrix.h"

namespace qs::ops {

// How the packed quantized linears treat their activations: kInt8 rounds x to int8 per
// 32-block (the int kernels, kernels/cpu/qlinear_cpu.h); kBf16 rounds x only to bf16 and keeps
// the products exact (kernels/cpu/qlinear_bf16act.h: what transformers and vLLM compute for a
// W4A16 checkpoint). Process-wide; it starts from QS_ACTIVATION_PRECISION (int8|bf16) and
// otherwise kDefaultActivationPrecision (docs/quantization.md has the measurement behind it).
enum class ActivationPrecision { kInt8, kBf16 };
inline constexpr ActivationPrecision kDefaultActivationPrecision = ActivationPrecision::kInt8;
ActivationPrecision activation_precision();
void set_activation_precision(ActivationPrecision p);
// "int8" / "bf16"; nullopt otherwise.
std::optional<ActivationPrecision> parse_activation_precision(const std::string& name);
const char* activation_precision_name(ActivationPrecision p);

// A weight as a backend (ops/backend.h) packed it at load for its own kernels: the CPU's bf16
// pair panels, a GPU's bf16 copy or W4A16 tiles. Opaque above ops; the backend that made it
// derives from this and keeps its buffers alive.
struct PackedWeight {
  virtual ~PackedWeight() = default;
  Device device;
  int64_t n = 0, k = 0;
  size_t bytes = 0;    // resident where `device` is
  std::string kernel;  // "bf16 (cublaslt)", "int4 g128 (cuda w4a16 mma)"
};

// A matmul weight as it stays resident. Models hold these and never look inside:
//   dense   the 16-bit [n, k] weight as the checkpoint stores it (usually a zero-copy view of
//           the mapping), which the quantizer and the CPU's fallback kernels read; empty for a
//           weight only a device holds;
//   quant   a quantized weight in the CPU backend's resident form (ops::QuantMatrix);
//   packed  the backend's own form (the CPU's bf16 pair panels, which its AVX-512 path reads
//           instead of `dense`; a device backend's weight, with `dense` and `quant` empty).
struct LinearWeight {
  Tensor dense;
  std::shared_ptr<const QuantMatrix> quant;
  std::shared_ptr<const PackedWeight> packed;

  // Whether the weight lives on a device (packed there; nothing the CPU's kernels can read).
  bool on_device() const { return packed != nullptr && !packed->device.is_cpu(); }
  // The CPU's bf16 pair panels (kernels/cpu/linear_cpu.h), or nullptr.
  const uint16_t* pair_panels() const;
  // Whether `isa`'s kernels read the pair panels rather than `dense`.
  bool reads_panels(kernels::Isa isa) const {
    return quant == nullptr && isa == kernels::Isa::kAvx512 && pair_panels() != nullptr;
  }

  LinearWeight() = default;
  LinearWeight(Tensor t) : dense(std::move(t)) {}  // NOLINT: dense weights convert implicitly
  LinearWeight(std::shared_ptr<const QuantMatrix> q) : quant(std::move(q)) {}  // NOLINT

  bool empty() const { return quant == nullptr && dense.empty() && packed == nullptr; }
  int64_t rows() const {  // n
    return packed ? packed->n : quant ? quant->rows() : dense.dim(0);
  }
  int64_t cols() const {  // k
    return packed ? packed->k : quant ? quant->cols() : dense.dim(1);
  }
  size_t resident_bytes() const;
  // "bf16 (avx512)", "int4 g128 (avx512-vnni)", ...
  std::string kernel() const;
};

// `dense` as a LinearWeight, with pair panels beside it where they pay: a 2-d bf16 weight on a
// CPU whose active kernels are AVX-512 without AMX (the AMX tiles read the row-major form).
// QS_BF16_PANELS=0 turns them off, for A/B runs. Fails only if memory runs out.
Result<LinearWeight> with_panels(Tensor dense);

// y[i, :] = x[i, :] @ w^T + bias for i in [0, m).
//   x: [m, k] f32, w: [n, k] (F32, F16 or BF16, as nn.Linear stores it), bias: [n] f32 or
//   nullptr, y: [m, n] f32. Work is split over the pool's threads.
Status linear(const float* x, int64_t m, const Tensor& w, const float* bias, float* y,
              ThreadPool& pool);

// The same for any resident weight: dense, int-packed, or dequantized fallback.
Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y,
              ThreadPool& pool);

// Several linears of the same x, as vLLM fuses q/k/v and gate/up: for decode-sized m their
// output columns are split over the threads as one range, so each weight pays no fork/join
// of its own and the small ones (k_proj, v_proj) do not leave threads idle; quantized weights
// share one quantization of x. Results equal separate linear() calls.
struct LinearOut {
  const LinearWeight* w;
  const float* bias;  // [n] or nullptr
  float* y;           // [m, n]
};
Status linear_many(const float* x, int64_t m, std::span<const LinearOut> outs, ThreadPool& pool);

// Linears over row ranges of one x, the routed matmul of a Mixture-of-Experts layer: rows
// [row_begin, row_begin + rows) of x [*, k] go through `w` into y [rows, n]. Groups may share
// rows (an expert's gate and up). Decode-sized groups (fewer rows than the GEMM wants) run in
// one fork/join over all their columns, with x quantized once, so a step that routes its
// tokens to many experts reads each chosen expert once and wakes the threads once; larger
// groups run one after another, each split over the threads. Results equal separate
// linear() calls.
struct GroupedOut {
  const LinearWeight* w;
  const float* bias;  // [n] or nullptr
  int64_t row_begin = 0;
  int64_t rows = 0;
  float* y;  // [rows, n]
};
Status linear_grouped(const float* x, std::span<const GroupedOut> outs, ThreadPool& pool);

// The same with the kernel ISA named instead of kernels::active_isa(), so that tests and
// benchmarks can compare every variant in one process. Fails if this CPU lacks `isa`.
Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const Tensor& w,
                       const float* bias, float* y, ThreadPool& pool);
Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const LinearWeight& w,
                       const float* bias, float* y, ThreadPool& pool);

}  // namespace qs::ops
