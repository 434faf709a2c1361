// formats: the logical content of one quantized linear weight W[n, k], the same whatever
// layout stored it. Every layout decodes to this (unpack) and encodes from it (pack); the
// kernels' load-time repack and the dequantize fallback start from it. Its dequantization
// here is the reference the kernels and the goldens are checked against.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace qs::formats {

enum class CodeType : uint8_t {
  kUint,     // codes are unsigned integers u in [0, 2^bits); value = scale * (u - zero)
  kFp8E4m3,  // codes are e4m3fn bytes; value = scale * fp8_to_f32(code); zeros unused (0)
};

struct QuantizedWeight {
  int64_t n = 0;  // output features (rows of nn.Linear's weight)
  int64_t k = 0;  // input features
  int bits = 4;
  CodeType code_type = CodeType::kUint;
  int64_t group_size = 0;           // > 0: columns of k per group; the last may be partial
  std::vector<uint8_t> codes;       // [n, k], one code per byte, unpacked
  std::vector<float> scales;        // [n, n_groups()]; exact values of the stored scales; may be
                                    // negative (AutoRound full-range symmetric)
  std::vector<int32_t> zeros;       // [n, n_groups()]; true zero points. GPTQ v1 stores zero-1
                                    // and adds 1 back unmasked, so 2^bits can occur
  std::vector<int32_t> g_idx;       // [k] group of each input column; empty = k / group_size
  DType scale_dtype = DType::kF16;  // how the checkpoint stored the scales

  int64_t n_groups() const { return group_size > 0 ? (k + group_size - 1) / group_size : 0; }
  int32_t group_of(int64_t col) const {
    return g_idx.empty() ? static_cast<int32_t>(col / group_size) : g_idx[col];
  }
  // Sizes, ranges (codes < 2^bits, zeros in [0, 2^bits], g_idx in [0, n_groups)) and finite
  // scales; the error names what is wrong. Loaders call it after unpacking a checkpoint.
  Status validate() const;
};

// out[n, k] (f32) = scale * (code - zero), or scale * fp8(code): the reference dequantization.
void dequantize(const QuantizedWeight& w, float* out);

// Tensor-parallel shards (each rank keeps a slice of every split linear, Megatron-style).
// Output rows [r0, r0 + rows): a column-parallel linear's shard (q/k/v, gate/up, lm_head).
QuantizedWeight slice_rows(const QuantizedWeight& w, int64_t r0, int64_t rows);
// Input columns [c0, c0 + cols): a row-parallel linear's shard (o_proj, down_proj). A group is
// never cut: the slice must start on a group boundary and end on one (or at k), else an error
// names the group size; act-order weights (a g_idx) are refused, since their groups are
// scattered over the columns.
Result<QuantizedWeight> slice_cols(const QuantizedWeight& w, int64_t c0, int64_t cols);

}  // namespace qs::formats
