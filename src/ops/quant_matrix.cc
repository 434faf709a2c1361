// ops: QuantMatrix, a quantized linear weight made resident (see quant_matrix.h).
#include "ops/quant_matrix.h"

#include "core/resident_arena.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/qlinear_bf16act.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "ops/linear.h"
#include "ops/qmatrix_pack.h"

namespace qs::ops {
namespace {

// Groups of the scale table: one for per-channel weights (group size <= 0 or >= k).
int64_t table_groups(const formats::QuantizedWeight& w) {
  return w.group_size > 0 ? (w.k + w.group_size - 1) / w.group_size : 1;
}

// What the repack and the dequantization index must exist: every read below is in bounds.
Status check_sizes(const formats::QuantizedWeight& w) {
  const std::string shape = "[" + std::to_string(w.n) + ", " + std::to_string(w.k) + "]";
  if (w.n <= 0 || w.k <= 0) return invalid_argument("quantized weight: empty shape " + shape);
  const bool fp8 = w.code_type == formats::CodeType::kFp8E4m3;
  if (!fp8 && (w.bits < 1 || w.bits > 8)) {
    return unimplemented("quantized weight " + shape + ": " + std::to_string(w.bits) +
                         "-bit codes are not supported (1..8)");
  }
  const auto nk = static_cast<size_t>(w.n * w.k);
  const int64_t G = table_groups(w);
  const auto ng = static_cast<size_t>(w.n * G);
  if (w.codes.size() != nk) {
    return invalid_argument("quantized weight " + shape + ": " + std::to_string(w.codes.size()) +
                            " codes, expected " + std::to_string(nk));
  }
  if (w.scales.size() != ng) {
    return invalid_argument("quantized weight " + shape + ": " + std::to_string(w.scales.size()) +
                            " scales, expected [" + std::to_string(w.n) + ", " + std::to_string(G) +
                            "]");
  }
  if (!w.zeros.empty() && w.zeros.size() != ng) {
    return invalid_argument("quantized weight " + shape + ": " + std::to_string(w.zeros.size()) +
                            " zeros, expected [" + std::to_string(w.n) + ", " + std::to_string(G) +
                            "]");
  }
  if (!w.g_idx.empty()) {
    if (w.g_idx.size() != static_cast<size_t>(w.k)) {
      return invalid_argument("quantized weight " + shape + ": g_idx has " +
                              std::to_string(w.g_idx.size()) + " entries, expected k");
    }
    for (int32_t g : w.g_idx) {
      if (g < 0 || g >= G) {
        return invalid_argument("quantized weight " + shape + ": g_idx entry " + std::to_string(g) +
                                " outside [0, " + std::to_string(G) + ")");
      }
    }
  }
  if (!fp8) {
    for (uint8_t c : w.codes) {
      if (c >> w.bits != 0) {
        return invalid_argument("quantized weight " + shape + ": code " + std::to_string(c) +
                                " does not fit " + std::to_string(w.bits) + " bits");
      }
    }
  }
  for (float s : w.scales) {
    if (!std::isfinite(s))
      return invalid_argument("quantized weight " + shape + ": non-finite scale");
  }
  return ok_status();
}

// The fallback: W[n, k] = scale * (code - zero) or scale * fp8(code), rounded to bf16.
Tensor dequantize_bf16(const formats::QuantizedWeight& w) {
  Tensor t = Tensor::zeros(DType::kBF16, {w.n, w.k});
  auto* out = t.mutable_ptr<uint16_t>();
  const int64_t G = table_groups(w);
  const bool fp8 = w.code_type == formats::CodeType::kFp8E4m3;
  for (int64_t j = 0; j < w.n; ++j) {
    for (int64_t c = 0; c < w.k; ++c) {
      const int64_t g = !w.g_idx.empty() ? w.g_idx[c] : (G == 1 ? 0 : c / w.group_size);
      const size_t at = static_cast<size_t>(j * G + g);
      const uint8_t code = w.codes[static_cast<size_t>(j * w.k + c)];
      const float v = fp8 ? w.scales[at] * fp8_e4m3_to_f32(code)
                          : w.scales[at] * static_cast<float>(static_cast<int32_t>(code) -
                                                              (w.zeros.empty() ? 0 : w.zeros[at]));
      out[j * w.k + c] = f32_to_bf16(v);
    }
  }
  return t;
}

// What the declared activation quantization needs of the weight and of its static scale.
Status check_act(const formats::QuantScheme& scheme, const formats::QuantizedWeight& w,
                 const std::string& why_unpacked, float input_scale, int32_t input_zero) {
  const formats::ActScheme& act = scheme.act;
  if (!act.quantized()) return ok_status();
  const std::string shape = "[" + std::to_string(w.n) + ", " + std::to_string(w.k) + "]";
  const bool fp8_codes = w.code_type == formats::CodeType::kFp8E4m3;
  if (fp8_codes && act.type == formats::ActType::kInt8) {
    return unimplemented("quantized weight " + shape +
                         ": fp8 weights with int8 activations are not supported");
  }
  if (!why_unpacked.empty()) {
    return unimplemented("quantized weight " + shape + ": activations " + act.describe() +
                         " need the packed kernels, which cannot run it: " + why_unpacked);
  }
  if (!act.dynamic && !(std::isfinite(input_scale) && input_scale > 0.0f)) {
    return invalid_argument("quantized weight " + shape + ": input_scale " +
                            std::to_string(input_scale) + " is not a positive finite number");
  }
  if (!act.dynamic && (input_zero < -128 || input_zero > 127)) {
    return invalid_argument("quantized weight " + shape + ": input_zero_point " +
                            std::to_string(input_zero) + " is outside int8");
  }
  if (act.strategy == formats::ActStrategy::kGroup && act.type == formats::ActType::kInt8 &&
      act.sym && (act.group_size % kernels::kQBlock != 0 || !w.g_idx.empty())) {
    return unimplemented("quantized weight " + shape + ": int8 activation groups of " +
                         std::to_string(act.group_size) +
                         " need a multiple of 32 and no act-order");
  }
  return ok_status();
}

// Whether the AVX512-BF16 kernels of kernels/cpu/qlinear_bf16act.h run the bf16-activation
// path (x86 only).
bool bf16act_kernels_run() {
#if QS_X86
  return kernels::active_isa() == kernels::Isa::kAvx512 && kernels::cpu::bf16act_supported();
#else
  return false;
#endif
}

}  // namespace

Result<std::shared_ptr<const QuantMatrix>> QuantMatrix::make(const formats::QuantScheme& scheme,
                                                             const formats::QuantizedWeight& w,
                                                             float input_scale,
                                                             int32_t input_zero) {
  QS_RETURN_IF_ERROR(check_sizes(w));
  auto q = std::make_shared<QuantMatrix>();
  q->n_ = w.n;
  q->k_ = w.k;
  q->scheme_ = scheme;
  q->reason_ = qmatrix_unsupported(w);
  if (scheme.act.quantized()) q->act_quant_ = act_quant_of(scheme.act);
  QS_RETURN_IF_ERROR(check_act(scheme, w, q->reason_, input_scale, input_zero));
  q->input_scale_ = input_scale;
  q->input_zero_ = input_zero;
  if (!q->reason_.empty()) {
    q->fallback_ = dequantize_bf16(w);
    return std::shared_ptr<const QuantMatrix>(std::move(q));
  }
  // Whole 64-byte lines: the kernels' masked loads never leave the allocation.
  const size_t bytes = (qmatrix_bytes(w) + 63) / 64 * 64;
  q->storage_ = alloc_resident(bytes);
  if (q->storage_ == nullptr) {
    return internal_error("quantized weight: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  q->storage_bytes_ = bytes;
  q->view_ = qmatrix_pack(w, q->storage_.get());
  // QS_EXACT_PANELS=0 keeps the per-column kernel for the exact path, for A/B runs.
  static const bool panels_on = [] {
    const char* env = std::getenv("QS_EXACT_PANELS");
    return env == nullptr || std::string(env) != "0";
  }();
  if (panels_on && !scheme.act.quantized() &&
      activation_precision() == ActivationPrecision::kBf16 &&
      kernels::qpanels_supported(q->view_) && bf16act_kernels_run()) {
    const size_t pbytes = (kernels::qpanels_bytes(q->view_) + 63) / 64 * 64;
    q->panels_storage_ = alloc_resident(pbytes);
    if (q->panels_storage_ == nullptr) {
      return internal_error("quantized weight: cannot allocate " + std::to_string(pbytes) +
                            " bytes");
    }
    q->panels_bytes_ = pbytes;
    q->panels_ = kernels::qpanels_pack(q->view_, q->panels_storage_.get());
    // The per-column layout goes: the panels hold the codes, scales and zero terms, and this
    // weight runs the exact kernels from now on whatever the precision later says. Only an
    // act-order permutation stays (the activations are gathered by it).
    std::shared_ptr<uint8_t[]> kept;
    size_t kept_bytes = 0;
    if (q->view_.perm != nullptr) {
      kept_bytes = kernels::qalign_up(static_cast<size_t>(q->view_.k) * sizeof(int32_t));
      kept = alloc_resident(kept_bytes);
      if (kept == nullptr) {
        return internal_error("quantized weight: cannot allocate " + std::to_string(kept_bytes) +
                              " bytes");
      }
      std::memcpy(kept.get(), q->view_.perm, static_cast<size_t>(q->view_.k) * sizeof(int32_t));
      q->view_.perm = reinterpret_cast<const int32_t*>(kept.get());
    }
    q->view_.codes = nullptr;
    q->view_.scales = nullptr;
    q->view_.zero_terms = nullptr;
    q->storage_ = std::move(kept);
    q->storage_bytes_ = kept_bytes;
  }
  return std::shared_ptr<const QuantMatrix>(std::move(q));
}

bool QuantMatrix::needs_bf16_kernels() const {
  const formats::ActScheme& a = scheme_.act;
  return view_.fp8 || a.type == formats::ActType::kFp8 ||
         (a.type == formats::ActType::kInt8 && !a.sym);
}

std::string QuantMatrix::kernel() const {
  if (!packed()) return "dequantized bf16: " + reason_;
  const std::string acts =
      scheme_.act.quantized() ? ", activations " + scheme_.act.describe() : std::string();
  if (panels() != nullptr) {
    const std::string group =
        view_.n_groups == 1 ? std::string("per-channel") : "g" + std::to_string(view_.group_size);
    return "int" + std::to_string(scheme_.quantized() ? scheme_.bits : view_.bits) + " " + group +
           " x bf16-exact activations (avx512-bf16 panels)";
  }
  if (needs_bf16_kernels()) {
    const std::string codes = view_.fp8 ? "fp8 e4m3 (1 byte)" : "int" + std::to_string(view_.bits);
    const std::string group =
        view_.n_groups == 1 ? std::string("per-channel") : "g" + std::to_string(view_.group_size);
    const bool simd = bf16act_kernels_run();
    return codes + " " + group + " x bf16-exact activations (" + (simd ? "avx512-bf16" : "scalar") +
           ")" + acts;
  }
  const std::string group =
      view_.n_groups == 1 ? std::string("per-channel") : "g" + std::to_string(view_.group_size);
  const kernels::Isa isa = kernels::active_isa();
  std::string isa_name = kernels::isa_name(isa);
  if (isa == kernels::Isa::kAvx512) {
    isa_name = kernels::amx_int8_active()
                   ? "avx512-vnni, amx from m = " + std::to_string(kernels::cpu::kQAmxMinRows)
                   : "avx512-vnni";
  }
  // 2- and 3-bit codes run on the 4-bit kernels; say so rather than hide the stored width.
  const std::string bits =
      scheme_.quantized() && scheme_.bits < view_.bits
          ? "int" + std::to_string(scheme_.bits) + " as int" + std::to_string(view_.bits)
          : "int" + std::to_string(view_.bits);
  return bits + " " + group + " (" + isa_name + ")" + acts;
}

size_t QuantMatrix::resident_bytes() const {
  return packed() ? storage_bytes_ + panels_bytes_ : fallback_.nbytes();
}

size_t QuantMatrix::resident_bytes_for(const formats::QuantScheme& scheme, int64_t n, int64_t k) {
  formats::QuantizedWeight w;
  w.n = n;
  w.k = k;
  w.bits = scheme.bits;
  const bool fp8 = scheme.layout == formats::Layout::kFp8;
  w.code_type = fp8 ? formats::CodeType::kFp8E4m3 : formats::CodeType::kUint;
  w.group_size = fp8 && scheme.block_k > 0 ? scheme.block_k : scheme.group_size;
  if (!scheme.sym) w.zeros = {0, 1};  // non-uniform: the packed form keeps zero terms
  if (!qmatrix_unsupported(w).empty()) return static_cast<size_t>(n * k) * 2;
  return (qmatrix_bytes(w) + 63) / 64 * 64;
}

}  // namespace qs::ops
