// ops: formats -> the CUDA kernels' weight layouts (see cuda_weights.h).
#include "ops/cuda_weights.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace qs::ops::cuda {

kernels::cuda::W4ScaleType w4_scale_type(DType scale_dtype) {
  if (scale_dtype == DType::kF16) return kernels::cuda::W4ScaleType::kF16;
  if (scale_dtype == DType::kBF16) return kernels::cuda::W4ScaleType::kBF16;
  return kernels::cuda::W4ScaleType::kF32;
}

W4A16Glue w4a16_source(const formats::QuantizedWeight& w, kernels::cuda::W4ScaleType scale_type) {
  W4A16Glue out;
  kernels::cuda::W4A16Source& s = out.src;
  s.n = w.n;
  s.k = w.k;
  s.group_size = w.group_size >= w.k ? 0 : w.group_size;
  s.codes = w.codes.data();
  s.scales = w.scales.data();
  const bool uniform =
      std::all_of(w.zeros.begin(), w.zeros.end(), [&](int32_t z) { return z == w.zeros[0]; });
  s.zeros = uniform ? nullptr : w.zeros.data();
  s.uniform_zero = w.zeros.empty() ? 0 : w.zeros[0];
  bool trivial = true;
  for (int64_t c = 0; c < static_cast<int64_t>(w.g_idx.size()); ++c) {
    trivial = trivial && w.g_idx[c] == c / w.group_size;
  }
  if (!trivial) {
    out.perm.resize(static_cast<size_t>(w.k));
    std::iota(out.perm.begin(), out.perm.end(), 0);
    std::stable_sort(out.perm.begin(), out.perm.end(),
                     [&](int32_t a, int32_t b) { return w.g_idx[a] < w.g_idx[b]; });
    s.perm = out.perm.data();
  }
  s.scale_type = scale_type;
  return out;
}

Status w4a16_supported(const formats::QuantizedWeight& w) {
  if (w.code_type != formats::CodeType::kUint || w.bits > 4) {
    return unimplemented("the CUDA W4A16 kernel takes integer codes of at most 4 bits, not " +
                         std::string(w.code_type == formats::CodeType::kUint ? "" : "fp8 ") +
                         std::to_string(w.bits) + "-bit ones");
  }
  if (w.group_size > 0 && w.group_size < w.k && w.group_size % 16 != 0) {
    return unimplemented("the CUDA W4A16 kernel takes groups of a multiple of 16 inputs, not " +
                         std::to_string(w.group_size));
  }
  return ok_status();
}

}  // namespace qs::ops::cuda
