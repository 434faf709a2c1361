// formats: the FP8 e4m3 weight layout, vllm-serving.md §2.4 (quant_method "fp8": AutoFP8, HF
// FineGrainedFP8, DeepSeek block scales) and §2.5 float-quantized (compressed-tensors). The
// codes are the stored e4m3fn bytes; every scale form becomes per-row groups of k: a tensor
// scale is replicated over rows, a block scale over the block_n rows of its block.
#include <algorithm>
#include <string>
#include <vector>

#include "formats/layout_util.h"

namespace qs::formats {
namespace {

//   P.weight           f8_e4m3 [n, k]
//   P.weight_scale     f32|bf16|f16: tensor [] or [1]; channel [n, 1]; group [n, ceil(k/g)]
//   P.weight_scale_inv f32|bf16|f16 [ceil(n/bn), ceil(k/bk)] (block; despite the name a
//                      multiplier, w = fp8 * s). compressed-tensors' block strategy stores the
//                      same tensor as P.weight_scale; either name is read.
bool blocked(const QuantScheme& scheme) {
  return scheme.block_n > 0 && scheme.block_k > 0;
}

// Columns per group of the QuantizedWeight for W[., k].
int64_t group_of_scheme(const QuantScheme& scheme, int64_t k) {
  return blocked(scheme) ? scheme.block_k : scheme.group_for(k);
}

Status supports(const QuantScheme& scheme, int64_t n, int64_t k) {
  if (scheme.bits != 8) {
    return unimplemented("the fp8 layout stores 8-bit e4m3 codes, not bits=" +
                         std::to_string(scheme.bits));
  }
  if (scheme.block_n < 0 || scheme.block_k < 0 || (scheme.block_n > 0) != (scheme.block_k > 0)) {
    return invalid_argument("fp8 block " + std::to_string(scheme.block_n) + "x" +
                            std::to_string(scheme.block_k) + " needs both sizes > 0");
  }
  if (scheme.group_size < -1) {
    return invalid_argument("group_size " + std::to_string(scheme.group_size) +
                            " is not a group size (> 0), -1 (channel) or 0 (tensor)");
  }
  return ok_status();
}

std::vector<int64_t> block_scale_shape(const QuantScheme& scheme, int64_t n, int64_t k) {
  return {ceil_div(n, scheme.block_n), ceil_div(k, scheme.block_k)};
}

std::vector<TensorExpect> expected(const QuantScheme& scheme, int64_t n, int64_t k) {
  const std::string shape_s = "n=" + std::to_string(n) + ", k=" + std::to_string(k);
  std::vector<TensorExpect> e;
  e.push_back({"weight", {DType::kF8E4M3}, {n, k}, true, false, shape_s + " imply"});
  if (blocked(scheme)) {
    const std::string why = shape_s + " in " + std::to_string(scheme.block_n) + "x" +
                            std::to_string(scheme.block_k) + " blocks imply";
    // One of the two must be there; unpack says so when neither is.
    e.push_back(
        {"weight_scale_inv", scale_dtypes(), block_scale_shape(scheme, n, k), false, false, why});
    e.push_back(
        {"weight_scale", scale_dtypes(), block_scale_shape(scheme, n, k), false, false, why});
  } else if (scheme.group_size == 0) {
    e.push_back({"weight_scale", scale_dtypes(), {}, true, true, "a per-tensor scale is"});
  } else {
    const int64_t groups = ceil_div(k, scheme.group_for(k));
    e.push_back({"weight_scale",
                 scale_dtypes(),
                 {n, groups},
                 true,
                 false,
                 shape_s + " in groups of " + std::to_string(scheme.group_for(k)) + " imply"});
  }
  return e;
}

Status unpack(const QuantScheme& scheme, const StoredTensors& stored, int64_t n, int64_t k,
              QuantizedWeight* out) {
  QuantizedWeight& w = *out;
  w.n = n;
  w.k = k;
  w.bits = 8;
  w.code_type = CodeType::kFp8E4m3;
  w.group_size = group_of_scheme(scheme, k);
  const int64_t groups = w.n_groups();
  const Tensor& weight = stored.at("weight");
  const uint8_t* bytes = static_cast<const uint8_t*>(weight.data);
  w.codes.assign(bytes, bytes + n * k);
  w.zeros.assign(static_cast<size_t>(n * groups), 0);
  w.scales.resize(static_cast<size_t>(n * groups));
  auto it = stored.find(blocked(scheme) ? "weight_scale_inv" : "weight_scale");
  if (it == stored.end()) it = stored.find("weight_scale");
  if (it == stored.end()) {
    return not_found("neither weight_scale_inv nor weight_scale is stored: " +
                     shape_string(block_scale_shape(scheme, n, k)) + " block scales expected");
  }
  const Tensor& scale = it->second;
  w.scale_dtype = scale.dtype;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      int64_t at = j * groups + g;
      if (blocked(scheme)) at = (j / scheme.block_n) * groups + g;
      if (scheme.group_size == 0 && !blocked(scheme)) at = 0;
      w.scales[j * groups + g] = load_float(scale, at);
    }
  }
  return ok_status();
}

Result<StoredTensors> pack(const QuantScheme& scheme, const QuantizedWeight& w) {
  QS_RETURN_IF_ERROR(supports(scheme, w.n, w.k));
  QS_RETURN_IF_ERROR(check_packable(scheme, w, group_of_scheme(scheme, w.k), CodeType::kFp8E4m3,
                                    "the fp8 layout"));
  if (!trivial_g_idx(w)) return invalid_argument("the fp8 layout cannot store a g_idx");
  const int64_t n = w.n, k = w.k, groups = w.n_groups();
  StoredTensors out;
  Tensor weight = Tensor::zeros(DType::kF8E4M3, {n, k});
  std::copy(w.codes.begin(), w.codes.end(), weight.mutable_ptr<uint8_t>());
  out["weight"] = std::move(weight);
  // The first row of each block (or row 0 for a tensor scale) holds the stored value; the
  // others must repeat it, or this layout cannot hold the weight.
  auto source_row = [&](int64_t j) -> int64_t {
    if (blocked(scheme)) return j / scheme.block_n * scheme.block_n;
    return scheme.group_size == 0 ? 0 : j;
  };
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t g = 0; g < groups; ++g) {
      if (w.scales[j * groups + g] != w.scales[source_row(j) * groups + g]) {
        return invalid_argument("the fp8 layout (" + scheme.describe() + ") shares scales over " +
                                "rows, but scale [" + std::to_string(j) + ", " + std::to_string(g) +
                                "] differs from row " + std::to_string(source_row(j)));
      }
    }
  }
  if (blocked(scheme)) {
    const std::vector<int64_t> shape = block_scale_shape(scheme, n, k);
    Tensor scale = Tensor::zeros(w.scale_dtype, shape);
    for (int64_t b = 0; b < shape[0]; ++b) {
      for (int64_t g = 0; g < groups; ++g) {
        store_float(scale, b * groups + g, w.scales[b * scheme.block_n * groups + g]);
      }
    }
    out["weight_scale_inv"] = std::move(scale);
  } else if (scheme.group_size == 0) {
    Tensor scale = Tensor::zeros(w.scale_dtype, {1});
    store_float(scale, 0, w.scales[0]);
    out["weight_scale"] = std::move(scale);
  } else {
    Tensor scale = Tensor::zeros(w.scale_dtype, {n, groups});
    for (int64_t i = 0; i < n * groups; ++i) store_float(scale, i, w.scales[i]);
    out["weight_scale"] = std::move(scale);
  }
  return out;
}

}  // namespace

const LayoutDef& fp8_layout_def() {
  static const LayoutDef kDef{Layout::kFp8, supports, expected, unpack, pack};
  return kDef;
}

}  // namespace qs::formats
