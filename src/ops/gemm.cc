// ops: f32 GEMM front end (gemm.h).
#include "ops/gemm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"
#include "kernels/ref/gemm_ref.h"
#include "ops/platform.h"

namespace qs::ops {
namespace {

// Per-thread packing buffers of the AVX-512 kernel, which only grow (kernels must not allocate).
std::vector<float>& pack_scratch(size_t count) {
  thread_local std::vector<float> buf;
  if (buf.size() < count) buf.resize(count);
  return buf;
}

// A transposed operand (A(i, p) = a[p * cs + i], as dW = dY^T X has it) makes the AVX2
// kernel broadcast from a new cache line at every p; copying it row-major once costs O(m k)
// against the product's O(m n k) and more than doubles their speed. The copy lives in a
// per-thread buffer that only grows (kernels must not allocate).
std::vector<float>& transpose_scratch(size_t count) {
  thread_local std::vector<float> buf;
  if (buf.size() < count) buf.resize(count);
  return buf;
}

void copy_row_major(const kernels::GemmArgs& g, float* out, ThreadPool* pool) {
  constexpr int64_t kTile = 32;
  auto rows = [&](int64_t i_begin, int64_t i_end) {
    for (int64_t p0 = 0; p0 < g.k; p0 += kTile) {
      const int64_t p1 = std::min(g.k, p0 + kTile);
      for (int64_t i = i_begin; i < i_end; ++i)
        for (int64_t p = p0; p < p1; ++p) out[i * g.k + p] = g.a[p * g.a_col_stride + i];
    }
  };
  if (pool == nullptr || pool->n_threads() == 1 || g.m * g.k < kMinParallelMacs) {
    rows(0, g.m);
  } else {
    pool->parallel_for(g.m, rows, kTile);
  }
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

Status gemm_with_isa(kernels::Isa isa, const kernels::GemmArgs& g, ThreadPool* pool) {
  if (!kernels::isa_supported(isa)) {
    return unimplemented(std::string("gemm: this CPU cannot run the ") + kernels::isa_name(isa) +
                         " kernels");
  }
  if (g.m < 0 || g.n < 0 || g.k < 0) return invalid_argument("gemm: negative size " + sizes(g));
  if (g.m == 0 || g.n == 0) return ok_status();
  if (g.c == nullptr || (g.k > 0 && (g.a == nullptr || g.b == nullptr))) {
    return invalid_argument("gemm: null operand, " + sizes(g));
  }
  if (g.ldb < g.n || g.ldc < g.n) {
    return invalid_argument("gemm: ldb=" + std::to_string(g.ldb) + " ldc=" + std::to_string(g.ldc) +
                            " shorter than a row, " + sizes(g));
  }
  const bool parallel =
      pool != nullptr && pool->n_threads() > 1 && g.m * g.n * g.k >= kMinParallelMacs;
  if (isa == kernels::Isa::kAvx512) {
    // Packs A through its strides itself; each thread packs into its own scratch.
    const auto floats = static_cast<size_t>(kernels::cpu::gemm_f32_avx512_scratch_floats(g));
    auto rows = [&](int64_t begin, int64_t end) {
      kernels::cpu::gemm_f32_avx512(g, begin, end, pack_scratch(floats).data());
    };
    if (parallel) {
      pool->parallel_for(g.m, rows, kernels::cpu::kGemmRowGrain);
    } else {
      rows(0, g.m);
    }
    return ok_status();
  }
  void (*kernel)(const kernels::GemmArgs&, int64_t, int64_t) = kernels::ref::gemm_f32;
  if (isa == kernels::Isa::kAvx2) kernel = kernels::cpu::gemm_f32_avx2;
  kernels::GemmArgs args = g;
  if (isa != kernels::Isa::kRef && g.a_col_stride != 1 && g.m > 1 && g.k > 1) {
    std::vector<float>& buf = transpose_scratch(static_cast<size_t>(g.m * g.k));
    copy_row_major(g, buf.data(), pool);
    args.a = buf.data();
    args.a_row_stride = g.k;
    args.a_col_stride = 1;
  }
  if (!parallel) {
    kernel(args, 0, g.m);
    return ok_status();
  }
  pool->parallel_for(
      g.m, [&](int64_t begin, int64_t end) { kernel(args, begin, end); },
      kernels::cpu::kGemmRowGrain);
  return ok_status();
}

Status gemm(const kernels::GemmArgs& g, ThreadPool* pool) {
  return gemm_with_isa(kernels::active_isa(), g, pool);
}

}  // namespace qs::ops
