// ops: f32 GEMM front end (gemm.h).
#include "ops/gemm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/ref/gemm_ref.h"
#include "ops/platform.h"

namespace qs::ops {
namespace {

// Per-thread packing buffers of the f32 kernel, which only grow (kernels must not allocate).
std::vector<float>& pack_scratch(size_t count) {
  thread_local std::vector<float> buf;
  if (buf.size() < count) buf.resize(count);
  return buf;
}

#if QS_X86
// Per-thread bf16 packing buffers (gemm_bf16_avx512), which only grow.
std::vector<uint32_t>& bf16_pack_scratch(size_t count) {
  thread_local std::vector<uint32_t> buf;
  if (buf.size() < count) buf.resize(count);
  return buf;
}
#endif

float round_bf16(float f, bool bf16) {
  return bf16 ? bf16_to_f32(f32_to_bf16(f)) : f;
}

// A as a row-major [m, k] copy, rounded to bf16.
void copy_a_bf16(const kernels::GemmArgs& g, float* out, ThreadPool* pool) {
  auto rows = [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i)
      for (int64_t p = 0; p < g.k; ++p)
        out[i * g.k + p] = round_bf16(g.a[i * g.a_row_stride + p * g.a_col_stride], true);
  };
  if (pool == nullptr || pool->n_threads() == 1 || g.m * g.k < kMinParallelMacs) {
    rows(0, g.m);
  } else {
    pool->parallel_for(g.m, rows, 32);
  }
}

// B as a row-major [k, n] copy, rounded to bf16 when `bf16`.
void copy_b(const kernels::GemmArgs& g, bool bf16, float* out) {
  for (int64_t p = 0; p < g.k; ++p)
    for (int64_t j = 0; j < g.n; ++j)
      out[p * g.n + j] = round_bf16(g.b[p * g.ldb + j * g.b_col_stride], bf16);
}

std::string sizes(const kernels::GemmArgs& g) {
  return "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k);
}

}  // namespace

kernels::GemmArgs gemm_args(const float* a, bool a_transposed, const float* b, float* c, int64_t m,
                            int64_t n, int64_t k, bool accumulate) {
  return kernels::GemmArgs{
      a, a_transposed ? 1 : k, a_transposed ? m : 1, b, n, c, n, m, n, k, accumulate};
}

const char* products_name(Products p) {
  return p == Products::kBf16 ? "bf16" : "f32";
}

bool bf16_products_native(kernels::Isa isa) {
#if QS_X86
  return isa == kernels::Isa::kAvx512 && kernels::cpu::gemm_bf16_avx512_supported();
#else
  return false;  // vdpbf16ps is AVX-512's; elsewhere bf16 operands are rounded, then f32 GEMM
#endif
}

Status gemm_with_isa(kernels::Isa isa, const kernels::GemmArgs& g, ThreadPool* pool,
                     Products products) {
  if (!kernels::isa_supported(isa)) {
    return unimplemented(std::string("gemm: this CPU cannot run the ") + kernels::isa_name(isa) +
                         " kernels");
  }
  if (g.m < 0 || g.n < 0 || g.k < 0) return invalid_argument("gemm: negative size " + sizes(g));
  if (g.m == 0 || g.n == 0) return ok_status();
  if (g.c == nullptr || (g.k > 0 && (g.a == nullptr || g.b == nullptr))) {
    return invalid_argument("gemm: null operand, " + sizes(g));
  }
  if (g.ldc < g.n || (g.b_col_stride == 1 && g.ldb < g.n)) {
    return invalid_argument("gemm: ldb=" + std::to_string(g.ldb) + " ldc=" + std::to_string(g.ldc) +
                            " shorter than a row, " + sizes(g));
  }
  const bool parallel =
      pool != nullptr && pool->n_threads() > 1 && g.m * g.n * g.k >= kMinParallelMacs;
  const bool bf16 = products == Products::kBf16;
#if QS_X86
  if (bf16 && bf16_products_native(isa)) {
    const auto dwords = static_cast<size_t>(kernels::cpu::gemm_bf16_avx512_scratch_dwords(g));
    auto rows = [&](int64_t begin, int64_t end) {
      kernels::cpu::gemm_bf16_avx512(g, begin, end, bf16_pack_scratch(dwords).data());
    };
    if (parallel) {
      pool->parallel_for(g.m, rows, kernels::cpu::kGemmRowGrain);
    } else {
      rows(0, g.m);
    }
    return ok_status();
  }
#endif
  if (bf16 && isa == kernels::Isa::kRef) {
    if (parallel) {
      pool->parallel_for(
          g.m, [&](int64_t begin, int64_t end) { kernels::ref::gemm_bf16(g, begin, end); },
          kernels::cpu::kGemmRowGrain);
    } else {
      kernels::ref::gemm_bf16(g, 0, g.m);
    }
    return ok_status();
  }
  if (bf16 || g.b_col_stride != 1) {
    // The f32 kernels take unrounded operands: hand them rounded copies. A transposed B is
    // copied row-major too: packing it straight through its strides (gemm_hwy.cc can) was
    // 12 % faster on the tuner's x W^T shapes but 7 % slower on SmolLM2's gate/up (one thread,
    // Zen 4, gemm_bench gemm_fwd). Both buffers are the caller's thread's and only grow; the
    // product is O(m n k) against the copies' O((m + n) k).
    thread_local std::vector<float> a_copy;
    thread_local std::vector<float> b_copy;
    kernels::GemmArgs args = g;
    if (bf16) {
      if (a_copy.size() < static_cast<size_t>(g.m * g.k)) a_copy.resize(g.m * g.k);
      copy_a_bf16(g, a_copy.data(), pool);
      args.a = a_copy.data();
      args.a_row_stride = g.k;
      args.a_col_stride = 1;
    }
    if (b_copy.size() < static_cast<size_t>(g.k * g.n)) b_copy.resize(g.k * g.n);
    copy_b(g, bf16, b_copy.data());
    args.b = b_copy.data();
    args.ldb = g.n;
    args.b_col_stride = 1;
    return gemm_with_isa(isa, args, pool, Products::kF32);
  }
  if (isa == kernels::Isa::kRef) {
    if (parallel) {
      pool->parallel_for(
          g.m, [&](int64_t begin, int64_t end) { kernels::ref::gemm_f32(g, begin, end); },
          kernels::cpu::kGemmRowGrain);
    } else {
      kernels::ref::gemm_f32(g, 0, g.m);
    }
    return ok_status();
  }
  // The Highway kernel (gemm_hwy.cc) of the target the per-token ops run for this ISA. It packs
  // A and B through their strides itself, each thread into its own scratch.
#if QS_X86
  static const kernels::cpu::GemmF32Kernel kAvx512Kernel =
      kernels::cpu::gemm_f32_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx512));
  static const kernels::cpu::GemmF32Kernel kAvx2Kernel =
      kernels::cpu::gemm_f32_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx2));
  const kernels::cpu::GemmF32Kernel kernel =
      isa == kernels::Isa::kAvx512 ? kAvx512Kernel : kAvx2Kernel;
#else
  static const kernels::cpu::GemmF32Kernel kernel =
      kernels::cpu::gemm_f32_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kHwy));
#endif
  const auto floats = static_cast<size_t>(kernels::cpu::gemm_f32_hwy_scratch_floats(g));
  auto rows = [&](int64_t begin, int64_t end) {
    kernel(g, begin, end, pack_scratch(floats).data());
  };
  if (parallel) {
    pool->parallel_for(g.m, rows, kernels::cpu::kGemmRowGrain);
  } else {
    rows(0, g.m);
  }
  return ok_status();
}

Status gemm(const kernels::GemmArgs& g, ThreadPool* pool, Products products) {
  return gemm_with_isa(kernels::active_isa(), g, pool, products);
}

}  // namespace qs::ops
