// formats: the AWQ GEMM layout (AutoAWQ "gemm", AutoRound's auto_round:auto_awq), see
// vllm-serving.md §2.2 and autoround.md §3.3. 4-bit codes packed along n, eight columns per
// int32 in AutoAWQ's interleaved order; zeros are true zeros (no v1 "-1").
#include <string>
#include <vector>

#include "formats/layout_util.h"

namespace qs::formats {
namespace {

//   P.qweight i32 [k, n/8]  word c of row i: nibble p (bits 4p..4p+3) holds W[8c + kOrder[p], i]
//   P.qzeros  i32 [G, n/8]  same order, zero(j, g)
//   P.scales  f16|bf16|f32 [G, n]
// The interleave is AutoAWQ's (awq/utils/packing_utils.py); Marlin's dequantizer reads the same.
constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

Status supports(const QuantScheme& scheme, int64_t n, int64_t k) {
  if (scheme.bits != 4) {
    return unimplemented(
        "the awq layout stores only 4-bit codes, not bits=" + std::to_string(scheme.bits) +
        " (other widths from AutoRound use the gptq layout)");
  }
  if (scheme.group_size == 0 || scheme.group_size < -1) {
    return invalid_argument("the awq layout needs group_size > 0 or -1 (per channel), not " +
                            std::to_string(scheme.group_size));
  }
  const int64_t group = scheme.group_for(k);
  if (k % group != 0) {
    return invalid_argument("k=" + std::to_string(k) + " is not a multiple of group_size=" +
                            std::to_string(group) + " (the awq layout has no partial groups)");
  }
  if (n % 8 != 0) {
    return invalid_argument("n=" + std::to_string(n) +
                            " is not a multiple of 8 (the awq layout packs 8 columns per int32)");
  }
  return ok_status();
}

std::vector<TensorExpect> expected(const QuantScheme& scheme, int64_t n, int64_t k) {
  const int64_t groups = k / scheme.group_for(k);
  const std::string n_s = "n=" + std::to_string(n);
  const std::string groups_s = "k=" + std::to_string(k) + " in groups of " +
                               std::to_string(scheme.group_for(k)) + " (" + std::to_string(groups) +
                               ")";
  return {
      {"qweight",
       {DType::kI32},
       {k, n / 8},
       true,
       false,
       "bits=4, k=" + std::to_string(k) + " and " + n_s + " imply"},
      {"qzeros", {DType::kI32}, {groups, n / 8}, true, false, n_s + " and " + groups_s + " imply"},
      {"scales", scale_dtypes(), {groups, n}, true, false, n_s + " and " + groups_s + " imply"},
  };
}

Status unpack(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
              QuantizedWeight* out) {
  const Tensor& qweight = stored.at("qweight");
  const Tensor& qzeros = stored.at("qzeros");
  const Tensor& scales = stored.at("scales");
  QuantizedWeight& w = *out;
  w.n = n;
  w.k = k;
  w.bits = 4;
  w.code_type = CodeType::kUint;
  w.group_size = scheme.group_for(k);
  w.scale_dtype = scales.dtype;
  const int64_t groups = w.n_groups(), words = n / 8;
  w.codes.resize(static_cast<size_t>(n * k));
  // Word column outer: the 8 output rows it feeds are written sequentially.
  for (int64_t c = 0; c < words; ++c) {
    uint8_t* rows[8];
    for (int p = 0; p < 8; ++p) rows[p] = w.codes.data() + (8 * c + kOrder[p]) * k;
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t word = load_word(qweight, i * words + c);
      for (int p = 0; p < 8; ++p) rows[p][i] = static_cast<uint8_t>((word >> (4 * p)) & 15);
    }
  }
  w.zeros.resize(static_cast<size_t>(n * groups));
  w.scales.resize(static_cast<size_t>(n * groups));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = load_word(qzeros, g * words + c);
      for (int p = 0; p < 8; ++p) {
        w.zeros[(8 * c + kOrder[p]) * groups + g] = static_cast<int32_t>((word >> (4 * p)) & 15);
      }
    }
    for (int64_t j = 0; j < n; ++j) w.scales[j * groups + g] = load_float(scales, g * n + j);
  }
  return ok_status();
}

Result<StoredTensors> pack(const QuantScheme& scheme, const QuantizedWeight& w) {
  QS_RETURN_IF_ERROR(supports(scheme, w.n, w.k));
  QS_RETURN_IF_ERROR(
      check_packable(scheme, w, scheme.group_for(w.k), CodeType::kUint, "the awq layout"));
  if (!trivial_g_idx(w)) {
    return invalid_argument("the awq layout cannot store an act-order g_idx");
  }
  const int64_t n = w.n, k = w.k, groups = w.n_groups(), words = n / 8;
  for (int64_t i = 0; i < n * groups; ++i) {
    if (w.zeros[i] > 15) {
      return invalid_argument("the awq layout cannot store zero " + std::to_string(w.zeros[i]) +
                              " of row " + std::to_string(i / groups) + " in 4 bits");
    }
  }
  Tensor qweight = Tensor::zeros(DType::kI32, {k, words});
  for (int64_t c = 0; c < words; ++c) {
    const uint8_t* rows[8];
    for (int p = 0; p < 8; ++p) rows[p] = w.codes.data() + (8 * c + kOrder[p]) * k;
    for (int64_t i = 0; i < k; ++i) {
      uint32_t word = 0;
      for (int p = 0; p < 8; ++p) word |= static_cast<uint32_t>(rows[p][i]) << (4 * p);
      store_word(qweight, i * words + c, word);
    }
  }
  Tensor qzeros = Tensor::zeros(DType::kI32, {groups, words});
  Tensor scales = Tensor::zeros(w.scale_dtype, {groups, n});
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t c = 0; c < words; ++c) {
      uint32_t word = 0;
      for (int p = 0; p < 8; ++p) {
        word |= static_cast<uint32_t>(w.zeros[(8 * c + kOrder[p]) * groups + g]) << (4 * p);
      }
      store_word(qzeros, g * words + c, word);
    }
    for (int64_t j = 0; j < n; ++j) store_float(scales, g * n + j, w.scales[j * groups + g]);
  }
  StoredTensors out;
  out["qweight"] = std::move(qweight);
  out["qzeros"] = std::move(qzeros);
  out["scales"] = std::move(scales);
  return out;
}

}  // namespace

const LayoutDef& awq_layout_def() {
  static const LayoutDef kDef{Layout::kAwq, supports, expected, unpack, pack};
  return kDef;
}

}  // namespace qs::formats
