// ops: the fused causal attention's front end (causal_attention.h).
#include "ops/causal_attention.h"

#include <string>
#include <vector>

#include "kernels/cpu/attention_bf16_cpu.h"
#include "kernels/cpu/isa.h"

namespace qs::ops {
namespace {

#if QS_X86
// Per-thread scratch of the kernel (packed K and V of one kv head, the tiles), which only
// grows (kernels must not allocate).
std::vector<char>& causal_attention_scratch(size_t bytes) {
  thread_local std::vector<char> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf;
}
#endif

}  // namespace

bool causal_attention_bf16_runs(int64_t head_dim) {
#if QS_X86
  static const bool native = kernels::active_isa() == kernels::Isa::kAvx512 &&
                             kernels::cpu::causal_attention_bf16_avx512_supported();
#else
  constexpr bool native = false;  // the kernel is AVX-512's
#endif
  return native && head_dim > 0 && head_dim % 2 == 0 &&
         head_dim <= kernels::cpu::kCausalAttentionBf16MaxHeadDim;
}

Status causal_attention_bf16(const CausalAttentionShape& s, const float* q, const float* k,
                             const float* v, float* out, float* lse, ThreadPool& pool) {
  const std::string shape = "(" + std::to_string(s.n_seqs) + " x " + std::to_string(s.seqlen) +
                            " tokens, " + std::to_string(s.n_heads) + " heads, " +
                            std::to_string(s.n_kv_heads) + " kv heads, head_dim " +
                            std::to_string(s.head_dim) + ")";
  if (s.n_seqs < 0 || s.seqlen < 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 ||
      s.n_heads % s.n_kv_heads != 0) {
    return invalid_argument("causal_attention_bf16: bad shape " + shape);
  }
  if (!causal_attention_bf16_runs(s.head_dim)) {
    return unimplemented("causal_attention_bf16: no kernel for " + shape +
                         " here (needs AVX512-BF16 and an even head_dim of at most 256)");
  }
  if (s.n_seqs == 0 || s.seqlen == 0) return ok_status();
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr || lse == nullptr) {
    return invalid_argument("causal_attention_bf16: null operand " + shape);
  }
#if QS_X86
  const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t q_dim = s.n_heads * hd, kv_dim = s.n_kv_heads * hd;
  const auto bytes =
      static_cast<size_t>(kernels::cpu::causal_attention_bf16_avx512_scratch_bytes(s.seqlen, hd));
  pool.parallel_for(s.n_seqs * s.n_kv_heads, [&](int64_t begin, int64_t end) {
    void* scratch = causal_attention_scratch(bytes).data();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / s.n_kv_heads, g = task % s.n_kv_heads;
      const int64_t row0 = b * s.seqlen;
      const kernels::cpu::CausalAttentionBf16Args args{q + row0 * q_dim + g * group * hd,
                                                       q_dim,
                                                       k + row0 * kv_dim + g * hd,
                                                       v + row0 * kv_dim + g * hd,
                                                       kv_dim,
                                                       out + row0 * q_dim + g * group * hd,
                                                       q_dim,
                                                       lse + (b * s.n_heads + g * group) * s.seqlen,
                                                       s.seqlen,
                                                       group,
                                                       hd,
                                                       s.scale};
      kernels::cpu::causal_attention_bf16_avx512(args, scratch);
    }
  });
#endif
  return ok_status();
}

}  // namespace qs::ops
