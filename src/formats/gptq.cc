// formats: the GPTQ layout (AutoGPTQ / GPTQModel, and AutoRound's auto_round:auto_gptq and
// auto_round packings), see vllm-serving.md §2.1 and autoround.md §3.2. Codes are packed along
// k and zeros along n as one LSB-first bit stream per column / group row, which is what makes
// 3-bit (32 values in 3 words, straddling word edges) the same code path as 2/4/8 bits.
#include <string>
#include <vector>

#include "formats/layout_util.h"

namespace qs::formats {
namespace {

//   P.qweight i32 [k*b/32, n]  column j = the bit stream of W[j, 0..k), value c at bit b*c
//   P.qzeros  i32 [G, n*b/32]  row g = the bit stream of zero(j, g) over j; v1 (zero_minus_one)
//                              stores zero-1 masked to b bits, readers add 1 back unmasked
//   P.scales  f16|bf16|f32 [G, n]   may be negative (AutoRound full-range sym)
//   P.g_idx   i32 [k] optional: group of input column c (permuted under desc_act)
Status supports(const QuantScheme& scheme, int64_t n, int64_t k) {
  const int b = scheme.bits;
  if (b != 2 && b != 3 && b != 4 && b != 8) {
    return unimplemented("the gptq layout stores 2, 3, 4 or 8 bits, not bits=" + std::to_string(b));
  }
  if (scheme.group_size == 0 || scheme.group_size < -1) {
    return invalid_argument("the gptq layout needs group_size > 0 or -1 (per channel), not " +
                            std::to_string(scheme.group_size));
  }
  if (k * b % 32 != 0) {
    return invalid_argument("k=" + std::to_string(k) + " with bits=" + std::to_string(b) +
                            " does not fill whole int32 words of qweight (k*bits must be a "
                            "multiple of 32)");
  }
  if (n * b % 32 != 0) {
    return invalid_argument("n=" + std::to_string(n) + " with bits=" + std::to_string(b) +
                            " does not fill whole int32 words of qzeros (n*bits must be a "
                            "multiple of 32)");
  }
  return ok_status();
}

std::vector<TensorExpect> expected(const QuantScheme& scheme, int64_t n, int64_t k) {
  const int b = scheme.bits;
  const int64_t group = scheme.group_for(k);
  const int64_t groups = ceil_div(k, group);
  const std::string bits_s = "bits=" + std::to_string(b);
  const std::string groups_s = "k=" + std::to_string(k) + " in groups of " + std::to_string(group) +
                               " (" + std::to_string(groups) + ")";
  std::vector<TensorExpect> e;
  e.push_back({"qweight",
               {DType::kI32},
               {k * b / 32, n},
               true,
               false,
               bits_s + ", k=" + std::to_string(k) + " and n=" + std::to_string(n) + " imply"});
  e.push_back({"qzeros",
               {DType::kI32},
               {groups, n * b / 32},
               true,
               false,
               bits_s + ", n=" + std::to_string(n) + " and " + groups_s + " imply"});
  e.push_back({"scales",
               scale_dtypes(),
               {groups, n},
               true,
               false,
               "n=" + std::to_string(n) + " and " + groups_s + " imply"});
  // Without g_idx an act-order checkpoint's column-to-group map is lost.
  e.push_back({"g_idx",
               {DType::kI32, DType::kI64},
               {k},
               scheme.desc_act && groups > 1,
               false,
               std::string(scheme.desc_act ? "desc_act=true and " : "") + "k=" + std::to_string(k) +
                   " imply"});
  return e;
}

Status unpack(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
              QuantizedWeight* out) {
  const Tensor& qweight = stored.at("qweight");
  const Tensor& qzeros = stored.at("qzeros");
  const Tensor& scales = stored.at("scales");
  const int b = scheme.bits;
  QuantizedWeight& w = *out;
  w.n = n;
  w.k = k;
  w.bits = b;
  w.code_type = CodeType::kUint;
  w.group_size = scheme.group_for(k);
  w.scale_dtype = scales.dtype;
  const int64_t groups = w.n_groups();
  const int64_t col_words = k * b / 32, zero_words = n * b / 32;

  w.codes.resize(static_cast<size_t>(n * k));
  if (32 % b == 0) {
    // 2/4/8 bits: whole values per word; this is the loader's hot loop, so no gather.
    const int per_word = 32 / b;
    const uint32_t mask = (1u << b) - 1;
    for (int64_t j = 0; j < n; ++j) {
      uint8_t* codes = w.codes.data() + j * k;
      for (int64_t r = 0; r < col_words; ++r) {
        const uint32_t word = load_word(qweight, r * n + j);
        for (int i = 0; i < per_word; ++i) {
          codes[r * per_word + i] = static_cast<uint8_t>((word >> (b * i)) & mask);
        }
      }
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const std::vector<uint32_t> words = gather_words(qweight, j, n, col_words);
      unpack_stream(words.data(), k, b, w.codes.data() + j * k);
    }
  }
  w.zeros.resize(static_cast<size_t>(n * groups));
  w.scales.resize(static_cast<size_t>(n * groups));
  const int32_t add = scheme.zero_minus_one ? 1 : 0;
  std::vector<uint8_t> row(static_cast<size_t>(n));
  for (int64_t g = 0; g < groups; ++g) {
    const std::vector<uint32_t> words = gather_words(qzeros, g * zero_words, 1, zero_words);
    unpack_stream(words.data(), n, b, row.data());
    for (int64_t j = 0; j < n; ++j) {
      w.zeros[j * groups + g] = row[j] + add;  // unmasked: a v1 stored 2^b-1 reads as 2^b
      w.scales[j * groups + g] = load_float(scales, g * n + j);
    }
  }
  auto it = stored.find("g_idx");
  if (it != stored.end()) {
    w.g_idx.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) {
      const int64_t v = load_int(it->second, c);
      if (v < 0 || v >= groups) {
        return data_loss("g_idx[" + std::to_string(c) + "] = " + std::to_string(v) +
                         " is outside [0, " + std::to_string(groups) + ")");
      }
      w.g_idx[c] = static_cast<int32_t>(v);
    }
  }
  return ok_status();
}

Result<StoredTensors> pack(const QuantScheme& scheme, const QuantizedWeight& w) {
  QS_RETURN_IF_ERROR(supports(scheme, w.n, w.k));
  QS_RETURN_IF_ERROR(
      check_packable(scheme, w, scheme.group_for(w.k), CodeType::kUint, "the gptq layout"));
  const int b = scheme.bits;
  const int64_t n = w.n, k = w.k, groups = w.n_groups();
  const int64_t col_words = k * b / 32, zero_words = n * b / 32;
  const int32_t sub = scheme.zero_minus_one ? 1 : 0;
  for (int64_t i = 0; i < n * groups; ++i) {
    const int32_t stored = w.zeros[i] - sub;
    if (stored < 0 || stored >= (1 << b)) {
      return invalid_argument("the gptq layout" + std::string(sub ? " with zero-1 (v1)" : "") +
                              " cannot store zero " + std::to_string(w.zeros[i]) + " of row " +
                              std::to_string(i / groups) + ", group " + std::to_string(i % groups) +
                              " in " + std::to_string(b) + " bits" +
                              (sub ? " (v1 cannot hold zero 0; use true zeros)" : ""));
    }
  }
  StoredTensors out;
  Tensor qweight = Tensor::zeros(DType::kI32, {col_words, n});
  for (int64_t j = 0; j < n; ++j) {
    std::vector<uint32_t> words(static_cast<size_t>(col_words), 0);
    pack_stream(w.codes.data() + j * k, k, b, words.data());
    scatter_words(words, qweight, j, n);
  }
  Tensor qzeros = Tensor::zeros(DType::kI32, {groups, zero_words});
  Tensor scales = Tensor::zeros(w.scale_dtype, {groups, n});
  std::vector<uint8_t> row(static_cast<size_t>(n));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < n; ++j) {
      row[j] = static_cast<uint8_t>(w.zeros[j * groups + g] - sub);
      store_float(scales, g * n + j, w.scales[j * groups + g]);
    }
    std::vector<uint32_t> words(static_cast<size_t>(zero_words), 0);
    pack_stream(row.data(), n, b, words.data());
    scatter_words(words, qzeros, g * zero_words, 1);
  }
  out["qweight"] = std::move(qweight);
  out["qzeros"] = std::move(qzeros);
  out["scales"] = std::move(scales);
  // An act-order scheme always carries g_idx (unpack requires it); otherwise only when given.
  if (!w.g_idx.empty() || (scheme.desc_act && groups > 1)) {
    Tensor g_idx = Tensor::zeros(DType::kI32, {k});
    for (int64_t c = 0; c < k; ++c) g_idx.mutable_ptr<int32_t>()[c] = w.group_of(c);
    out["g_idx"] = std::move(g_idx);
  }
  return out;
}

}  // namespace

const LayoutDef& gptq_layout_def() {
  static const LayoutDef kDef{Layout::kGptq, supports, expected, unpack, pack};
  return kDef;
}

}  // namespace qs::formats
