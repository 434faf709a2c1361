// formats: how one linear layer's weight is quantized and stored, as detection decides it
// (io/quant_config.h) and as the loader, `inspect` and (later) the exporter read it. Plain data:
// no tensors, no JSON. A layer left in 16 bits has layout kDense.
#pragma once

#include <cstdint>
#include <string>

namespace qs::formats {

// The stored layouts, one entry each in the formats table (formats/layouts.h).
enum class Layout : uint8_t {
  kDense,     // not quantized: P.weight [n, k] f32/f16/bf16
  kGptq,      // P.qweight i32 [k*b/32, n] packed along k; P.qzeros i32 [G, n*b/32] packed
              // along n (32 | k*b and 32 | n*b); P.scales f16/bf16 [G, n]; P.g_idx i32 [k]
              // optional
  kAwq,       // P.qweight i32 [k, n*b/32] packed along n in 0,2,4,6,1,3,5,7 order;
              // P.qzeros i32 [G, n*b/32] same order; P.scales [G, n]
  kCtPacked,  // compressed-tensors pack-quantized: P.weight_packed i32 [n, ceil(k/(32/b))]
              // packed along k, offset binary; P.weight_scale [n, G]; P.weight_zero_point i32
              // [ceil(n/(32/b)), G] (asym only); P.weight_g_idx i32 [k] optional;
              // P.weight_shape i32/i64 [2] optional
  kCtInt,     // compressed-tensors int-quantized / naive-quantized: P.weight i8 [n, k] signed;
              // P.weight_scale [n, G] (channel: [n, 1]; tensor: [1]); P.weight_zero_point
              // i8/i32 same shape (asym only)
  kFp8,       // P.weight f8_e4m3 [n, k]; P.weight_scale f32 (tensor [] / [1], channel [n, 1])
              // or P.weight_scale_inv f32 [ceil(n/bn), ceil(k/bk)] (block); both multipliers
};

const char* layout_name(Layout layout);  // "dense", "gptq", "awq", "ct-pack", "ct-int", "fp8"

// How a W8A8 checkpoint quantizes a linear's input, as its config declares it
// (compressed-tensors input_activations, fp8 activation_scheme; vllm-serving.md §2.4-§2.5).
// The kernels reproduce it (ops/quant_matrix.h): the activation grid of an fp8 tensor core or
// an int8 GEMM, with f32 products. kNone: weight-only (W4A16, W8A16).
enum class ActType : uint8_t { kNone, kInt8, kFp8 };
enum class ActStrategy : uint8_t {
  kToken,   // one scale per row of x (per token)
  kTensor,  // one scale for the whole call (static: the checkpoint's input_scale)
  kGroup,   // one scale per row and `group_size` inputs (fp8 block checkpoints: 1 x 128)
};
struct ActScheme {
  ActType type = ActType::kNone;
  ActStrategy strategy = ActStrategy::kToken;
  bool dynamic = true;     // scales from x at run time; false: input_scale (+ input_zero_point)
  bool sym = true;         // false: an int8 zero point (input_zero_point, or per token)
  int64_t group_size = 0;  // kGroup only
  bool quantized() const { return type != ActType::kNone; }
  // "int8 dynamic per-token sym", "fp8 static per-tensor", "none".
  std::string describe() const;
};
bool operator==(const ActScheme& a, const ActScheme& b);

struct QuantScheme {
  Layout layout = Layout::kDense;
  int bits = 16;            // 2, 3, 4, 8 for the int layouts; 8 for fp8
  int64_t group_size = -1;  // columns of k per scale; -1 = one group per row (per channel);
                            // 0 = one scale for the whole tensor (fp8 / ct tensor strategy)
  bool sym = true;          // symmetric: no zeros stored (ct) or zeros all 2^(b-1) (gptq/awq)
  // GPTQ v1 (checkpoint_format "gptq", auto_round:auto_gptq, legacy backends containing
  // "gptq"): qzeros hold zero - 1 and readers add 1 back without masking.
  bool zero_minus_one = false;
  bool desc_act = false;  // act-order: g_idx is a permutation of groups, not k / group_size
  // fp8 block scales (weight_scale_inv): rows x columns of one block; 0 when not blocked.
  int64_t block_n = 0, block_k = 0;
  ActScheme act{};  // how the input is quantized (W8A8); none for weight-only schemes

  bool quantized() const { return layout != Layout::kDense; }
  // Columns per group for a weight of `k` input columns: k for -1 and 0.
  int64_t group_for(int64_t k) const { return group_size > 0 ? group_size : k; }
  // "gptq int4 g128 sym zero-1", "awq int4 g128 asym", "fp8 e4m3 block 128x128", "dense";
  // W8A8 schemes end in "; activations int8 dynamic per-token sym".
  std::string describe() const;
};

bool operator==(const QuantScheme& a, const QuantScheme& b);

}  // namespace qs::formats
