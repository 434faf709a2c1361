// formats: the formats table and the checks every layout shares (layouts.h). The per-layout
// definitions live in one file each; this file only routes to them and turns a mismatch
// between the scheme and the stored tensors into one precise message.
#include "formats/layouts.h"

#include "core/check.h"
#include "formats/layout_util.h"

namespace qs::formats {
namespace {

std::string dtype_list(const std::vector<DType>& dtypes) {
  std::string s;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) s += i + 1 == dtypes.size() ? " or " : ", ";
    s += dtype_name(dtypes[i]);
  }
  return s;
}

std::string expected_shape(const TensorExpect& e) {
  return e.scalar_ok ? std::string("[] or [1]") : shape_string(e.shape);
}

bool shape_matches(const TensorExpect& e, const std::vector<int64_t>& shape) {
  if (e.scalar_ok) return shape.empty() || shape == std::vector<int64_t>{1};
  return shape == e.shape;
}

}  // namespace

const LayoutDef& layout_def(Layout layout) {
  switch (layout) {
    case Layout::kGptq:
      return gptq_layout_def();
    case Layout::kAwq:
      return awq_layout_def();
    case Layout::kCtPacked:
      return ct_packed_layout_def();
    case Layout::kCtInt:
      return ct_int_layout_def();
    case Layout::kFp8:
      return fp8_layout_def();
    case Layout::kDense:
      break;
  }
  QS_CHECK_MSG(false, "the dense layout has no entry in the formats table");
  return gptq_layout_def();
}

Status check_stored(const std::string& prefix, const QuantScheme& scheme,
                    const StoredTensors& stored, int64_t n, int64_t k) {
  const LayoutDef& def = layout_def(scheme.layout);
  if (n <= 0 || k <= 0) {
    return invalid_argument(prefix + ": a linear weight of shape [" + std::to_string(n) + ", " +
                            std::to_string(k) + "] cannot be quantized");
  }
  const std::string context = prefix + " (" + scheme.describe() + ", weight [" + std::to_string(n) +
                              ", " + std::to_string(k) + "])";
  QS_RETURN_IF_ERROR(def.supports(scheme, n, k).with_context(context));
  for (const TensorExpect& e : def.expected(scheme, n, k)) {
    // "P.qweight <problem>: bits=4, k=896 and n=4864 imply qweight [112, 4864] I32 (scheme)"
    auto error = [&](StatusCode code, const std::string& problem) {
      return Status(code, prefix + "." + e.suffix + " " + problem + ": " + e.why + " " + e.suffix +
                              " " + expected_shape(e) + " " + dtype_list(e.dtypes) + " (" +
                              scheme.describe() + ")");
    };
    auto it = stored.find(e.suffix);
    if (it == stored.end()) {
      if (!e.required) continue;
      return error(StatusCode::kNotFound, "is missing");
    }
    const Tensor& t = it->second;
    bool dtype_ok = false;
    for (DType d : e.dtypes) dtype_ok = dtype_ok || d == t.dtype;
    if (!dtype_ok) {
      return error(StatusCode::kInvalidArgument, std::string("has dtype ") + dtype_name(t.dtype) +
                                                     ", expected " + dtype_list(e.dtypes));
    }
    if (!shape_matches(e, t.shape)) {
      return error(StatusCode::kInvalidArgument,
                   "has shape " + shape_string(t.shape) + ", expected " + expected_shape(e));
    }
  }
  return ok_status();
}

Result<QuantizedWeight> unpack(const std::string& prefix, const QuantScheme& scheme,
                               const StoredTensors& stored, int64_t n, int64_t k) {
  QS_RETURN_IF_ERROR(check_stored(prefix, scheme, stored, n, k));
  QuantizedWeight w;
  const std::string context = prefix + " (" + scheme.describe() + ")";
  QS_RETURN_IF_ERROR(
      layout_def(scheme.layout).unpack(scheme, stored, n, k, &w).with_context(context));
  QS_RETURN_IF_ERROR(w.validate().with_context(context));
  return w;
}

}  // namespace qs::formats
