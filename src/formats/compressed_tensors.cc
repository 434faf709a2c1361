// formats: compressed-tensors' integer layouts (llm-compressor output), vllm-serving.md §2.5:
// pack-quantized (kCtPacked, WNA16) and int-/naive-quantized (kCtInt, one int8 per value).
// Both keep signed codes q in [-2^(b-1), 2^(b-1)); we hold u = q + 2^(b-1), so symmetric
// schemes have zero 2^(b-1) and the sign of the scale is kept as stored.
//
// Zero points, as read in neuralmagic/compressed-tensors
// src/compressed_tensors/compressors/quantized_compressors/pack_quantized.py: the zero point
// is a signed int8 in the quantized domain (dequant (q - zp) * s), and pack_to_int32 adds the
// same offset 2^(b-1) to it as to the weights before packing it along n (packed_dim=0), only
// for asymmetric group/channel strategies. So a packed zero point read back is already the
// unsigned zero of u: (u - zu) = (q - zp). Unpacked zero points (int-quantized, and tensor
// strategy) stay signed and get the offset here. pack_to_int32 puts floor(32/b) values in
// each word (10 for 3 bits, with two spare bits), not GPTQ's cross-word 3-bit stream.
#include <string>
#include <vector>

#include "formats/layout_util.h"

namespace qs::formats {
namespace {

//   P.weight_packed     i32 [n, ceil(k/(32/b))]  (kCtPacked) row j = u of W[j, :], word-aligned
//   P.weight            i8  [n, k]               (kCtInt) signed q
//   P.weight_scale      f16|bf16|f32 [n, G] (channel [n, 1]; tensor strategy [] or [1])
//   P.weight_zero_point (asym only) kCtPacked: i32 [ceil(n/(32/b)), G] column g packed along n;
//                       kCtInt and tensor strategy: i8|i32 signed, shaped as the scale
//   P.weight_g_idx      i32 [k] optional (actorder=group)
//   P.weight_shape      i32|i64 [2] optional, = [n, k]
bool per_tensor(const QuantScheme& scheme) {
  return scheme.group_size == 0;
}

// Groups of the stored scale: 1 for the tensor strategy, else ceil(k / group).
int64_t stored_groups(const QuantScheme& scheme, int64_t k) {
  return per_tensor(scheme) ? 1 : ceil_div(k, scheme.group_for(k));
}

Status supports(const QuantScheme& scheme, int64_t n, int64_t k) {
  if (scheme.bits < 2 || scheme.bits > 8) {
    return unimplemented("compressed-tensors integer layouts store 2 to 8 bits, not bits=" +
                         std::to_string(scheme.bits));
  }
  if (scheme.group_size < -1) {
    return invalid_argument("group_size " + std::to_string(scheme.group_size) +
                            " is not a group size (> 0), -1 (channel) or 0 (tensor)");
  }
  return ok_status();
}

std::vector<TensorExpect> common_expected(const QuantScheme& scheme, int64_t n, int64_t k,
                                          Layout layout) {
  const int b = scheme.bits;
  const int64_t groups = stored_groups(scheme, k);
  const std::string shape_s = "n=" + std::to_string(n) + ", k=" + std::to_string(k);
  const std::string strategy = per_tensor(scheme) ? "the tensor strategy implies"
                                                  : shape_s + " and groups of " +
                                                        std::to_string(scheme.group_for(k)) + " (" +
                                                        std::to_string(groups) + ") imply";
  std::vector<TensorExpect> e;
  if (layout == Layout::kCtPacked) {
    e.push_back({"weight_packed",
                 {DType::kI32},
                 {n, aligned_words(k, b)},
                 true,
                 false,
                 "bits=" + std::to_string(b) + " and " + shape_s + " imply"});
  } else {
    e.push_back({"weight", {DType::kI8}, {n, k}, true, false, shape_s + " imply"});
  }
  const std::vector<int64_t> scale_shape =
      per_tensor(scheme) ? std::vector<int64_t>{} : std::vector<int64_t>{n, groups};
  e.push_back({"weight_scale", scale_dtypes(), scale_shape, true, per_tensor(scheme), strategy});
  if (!scheme.sym) {
    if (layout == Layout::kCtPacked && !per_tensor(scheme)) {
      e.push_back({"weight_zero_point",
                   {DType::kI32},
                   {aligned_words(n, b), groups},
                   true,
                   false,
                   "asymmetric, bits=" + std::to_string(b) + ", " + strategy});
    } else {
      e.push_back({"weight_zero_point",
                   {DType::kI8, DType::kI32},
                   scale_shape,
                   true,
                   per_tensor(scheme),
                   "asymmetric, " + strategy});
    }
  }
  e.push_back({"weight_g_idx",
               {DType::kI32, DType::kI64},
               {k},
               scheme.desc_act && groups > 1,
               false,
               "k=" + std::to_string(k) + " implies"});
  e.push_back({"weight_shape", {DType::kI32, DType::kI64}, {2}, false, false, "a 2-d weight has"});
  return e;
}

std::vector<TensorExpect> packed_expected(const QuantScheme& scheme, int64_t n, int64_t k) {
  return common_expected(scheme, n, k, Layout::kCtPacked);
}

std::vector<TensorExpect> int_expected(const QuantScheme& scheme, int64_t n, int64_t k) {
  return common_expected(scheme, n, k, Layout::kCtInt);
}

// A signed value of the quantized domain, shifted to the unsigned codes we hold.
Result<int32_t> offset_signed(int64_t v, int b, const std::string& what) {
  const int64_t half = int64_t{1} << (b - 1);
  if (v < -half || v >= half) {
    return data_loss(what + " = " + std::to_string(v) + " is outside the signed " +
                     std::to_string(b) + "-bit range [" + std::to_string(-half) + ", " +
                     std::to_string(half - 1) + "]");
  }
  return static_cast<int32_t>(v + half);
}

// Everything but the codes: scales, zeros, g_idx, the weight_shape check.
Status unpack_common(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
                     Layout layout, QuantizedWeight* out) {
  QuantizedWeight& w = *out;
  const int b = scheme.bits;
  const Tensor& scale = stored.at("weight_scale");
  w.scale_dtype = scale.dtype;
  const int64_t groups = w.n_groups(), sgroups = stored_groups(scheme, k);
  w.scales.resize(static_cast<size_t>(n * groups));
  w.zeros.assign(static_cast<size_t>(n * groups), 1 << (b - 1));
  for (int64_t i = 0; i < n * groups; ++i) {
    w.scales[i] = load_float(scale, per_tensor(scheme) ? 0 : i);
  }
  if (!scheme.sym) {
    const Tensor& zp = stored.at("weight_zero_point");
    if (layout == Layout::kCtPacked && !per_tensor(scheme)) {
      const int64_t words = aligned_words(n, b);
      std::vector<uint8_t> column(static_cast<size_t>(n));
      for (int64_t g = 0; g < groups; ++g) {
        const std::vector<uint32_t> packed = gather_words(zp, g, sgroups, words);
        unpack_aligned(packed.data(), n, b, column.data());
        for (int64_t j = 0; j < n; ++j) w.zeros[j * groups + g] = column[j];
      }
    } else {
      for (int64_t i = 0; i < n * groups; ++i) {
        const int64_t at = per_tensor(scheme) ? 0 : i;
        QS_ASSIGN_OR_RETURN(
            w.zeros[i],
            offset_signed(load_int(zp, at), b, "weight_zero_point[" + std::to_string(at) + "]"));
      }
    }
  }
  auto g_idx = stored.find("weight_g_idx");
  if (g_idx != stored.end()) {
    w.g_idx.resize(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) {
      const int64_t v = load_int(g_idx->second, c);
      if (v < 0 || v >= groups) {
        return data_loss("weight_g_idx[" + std::to_string(c) + "] = " + std::to_string(v) +
                         " is outside [0, " + std::to_string(groups) + ")");
      }
      w.g_idx[c] = static_cast<int32_t>(v);
    }
  }
  auto shape = stored.find("weight_shape");
  if (shape != stored.end()) {
    const int64_t s0 = load_int(shape->second, 0), s1 = load_int(shape->second, 1);
    if (s0 != n || s1 != k) {
      return data_loss("weight_shape says [" + std::to_string(s0) + ", " + std::to_string(s1) +
                       "] but the model expects [" + std::to_string(n) + ", " + std::to_string(k) +
                       "]");
    }
  }
  return ok_status();
}

void init_weight(const QuantScheme& scheme, int64_t n, int64_t k, QuantizedWeight* w) {
  w->n = n;
  w->k = k;
  w->bits = scheme.bits;
  w->code_type = CodeType::kUint;
  w->group_size = scheme.group_for(k);
  w->codes.resize(static_cast<size_t>(n * k));
}

Status packed_unpack(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
                     QuantizedWeight* out) {
  init_weight(scheme, n, k, out);
  const Tensor& packed = stored.at("weight_packed");
  const int64_t words = aligned_words(k, scheme.bits);
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<uint32_t> row = gather_words(packed, j * words, 1, words);
    unpack_aligned(row.data(), k, scheme.bits, out->codes.data() + j * k);
  }
  return unpack_common(scheme, stored, n, k, Layout::kCtPacked, out);
}

Status int_unpack(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
                  QuantizedWeight* out) {
  init_weight(scheme, n, k, out);
  const Tensor& weight = stored.at("weight");
  for (int64_t i = 0; i < n * k; ++i) {
    QS_ASSIGN_OR_RETURN(int32_t u, offset_signed(load_int(weight, i), scheme.bits,
                                                 "weight[" + std::to_string(i / k) + ", " +
                                                     std::to_string(i % k) + "]"));
    out->codes[i] = static_cast<uint8_t>(u);
  }
  return unpack_common(scheme, stored, n, k, Layout::kCtInt, out);
}

// The checks and tensors both packers share; `out` receives scale, zero point, g_idx, shape.
Status pack_common(const QuantScheme& scheme, const QuantizedWeight& w, Layout layout,
                   StoredTensors* out) {
  const char* what = layout == Layout::kCtPacked ? "the ct-pack layout" : "the ct-int layout";
  QS_RETURN_IF_ERROR(supports(scheme, w.n, w.k));
  QS_RETURN_IF_ERROR(check_packable(scheme, w, scheme.group_for(w.k), CodeType::kUint, what));
  const int b = scheme.bits;
  const int32_t half = 1 << (b - 1);
  const int64_t n = w.n, k = w.k, groups = w.n_groups();
  for (int64_t i = 0; i < n * groups; ++i) {
    if (scheme.sym && w.zeros[i] != half) {
      return invalid_argument(std::string(what) + " symmetric stores no zero point, but zero [" +
                              std::to_string(i / groups) + ", " + std::to_string(i % groups) +
                              "] is " + std::to_string(w.zeros[i]) + ", not " +
                              std::to_string(half));
    }
    if (w.zeros[i] >= (1 << b)) {
      return invalid_argument(std::string(what) + " cannot store zero " +
                              std::to_string(w.zeros[i]) + " in " + std::to_string(b) + " bits");
    }
    if (per_tensor(scheme) && (w.scales[i] != w.scales[0] || w.zeros[i] != w.zeros[0])) {
      return invalid_argument(std::string(what) +
                              " with the tensor strategy stores one scale and zero, but row " +
                              std::to_string(i) + " differs from row 0");
    }
  }
  // The tensor strategy stores row 0's scale and zero (all rows are equal, checked above).
  const int64_t n_stored = per_tensor(scheme) ? 1 : n * groups;
  const std::vector<int64_t> scale_shape =
      per_tensor(scheme) ? std::vector<int64_t>{1} : std::vector<int64_t>{n, groups};
  Tensor scale = Tensor::zeros(w.scale_dtype, scale_shape);
  for (int64_t i = 0; i < n_stored; ++i) store_float(scale, i, w.scales[i]);
  (*out)["weight_scale"] = std::move(scale);
  if (!scheme.sym) {
    if (layout == Layout::kCtPacked && !per_tensor(scheme)) {
      const int64_t words = aligned_words(n, b);
      Tensor zp = Tensor::zeros(DType::kI32, {words, groups});
      std::vector<uint8_t> column(static_cast<size_t>(n));
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t j = 0; j < n; ++j) column[j] = static_cast<uint8_t>(w.zeros[j * groups + g]);
        std::vector<uint32_t> packed(static_cast<size_t>(words), 0);
        pack_aligned(column.data(), n, b, packed.data());
        scatter_words(packed, zp, g, groups);
      }
      (*out)["weight_zero_point"] = std::move(zp);
    } else {
      Tensor zp = Tensor::zeros(DType::kI8, scale_shape);
      for (int64_t i = 0; i < n_stored; ++i) {
        zp.mutable_ptr<int8_t>()[i] = static_cast<int8_t>(w.zeros[i] - half);
      }
      (*out)["weight_zero_point"] = std::move(zp);
    }
  }
  if (!w.g_idx.empty() || (scheme.desc_act && groups > 1)) {
    Tensor g_idx = Tensor::zeros(DType::kI32, {k});
    for (int64_t c = 0; c < k; ++c) g_idx.mutable_ptr<int32_t>()[c] = w.group_of(c);
    (*out)["weight_g_idx"] = std::move(g_idx);
  }
  // compressed-tensors writes torch.tensor(weight.shape), an int64 [2].
  Tensor shape = Tensor::zeros(DType::kI64, {2});
  shape.mutable_ptr<int64_t>()[0] = n;
  shape.mutable_ptr<int64_t>()[1] = k;
  (*out)["weight_shape"] = std::move(shape);
  return ok_status();
}

Result<StoredTensors> packed_pack(const QuantScheme& scheme, const QuantizedWeight& w) {
  StoredTensors out;
  QS_RETURN_IF_ERROR(pack_common(scheme, w, Layout::kCtPacked, &out));
  const int64_t words = aligned_words(w.k, w.bits);
  Tensor packed = Tensor::zeros(DType::kI32, {w.n, words});
  for (int64_t j = 0; j < w.n; ++j) {
    std::vector<uint32_t> row(static_cast<size_t>(words), 0);
    pack_aligned(w.codes.data() + j * w.k, w.k, w.bits, row.data());
    scatter_words(row, packed, j * words, 1);
  }
  out["weight_packed"] = std::move(packed);
  return out;
}

Result<StoredTensors> int_pack(const QuantScheme& scheme, const QuantizedWeight& w) {
  StoredTensors out;
  QS_RETURN_IF_ERROR(pack_common(scheme, w, Layout::kCtInt, &out));
  Tensor weight = Tensor::zeros(DType::kI8, {w.n, w.k});
  const int32_t half = 1 << (w.bits - 1);
  for (int64_t i = 0; i < w.n * w.k; ++i) {
    weight.mutable_ptr<int8_t>()[i] = static_cast<int8_t>(w.codes[i] - half);
  }
  out["weight"] = std::move(weight);
  return out;
}

}  // namespace

const LayoutDef& ct_packed_layout_def() {
  static const LayoutDef kDef{Layout::kCtPacked, supports, packed_expected, packed_unpack,
                              packed_pack};
  return kDef;
}

const LayoutDef& ct_int_layout_def() {
  static const LayoutDef kDef{Layout::kCtInt, supports, int_expected, int_unpack, int_pack};
  return kDef;
}

}  // namespace qs::formats
