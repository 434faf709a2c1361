// formats: the helpers the layout files share (layout_util.h).
#include "formats/layout_util.h"

#include <cstring>

#include "core/check.h"

namespace qs::formats {

int64_t load_int(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data);
  switch (t.dtype) {
    case DType::kI8:
      return static_cast<int8_t>(p[i]);
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p + i * 2, 2);
      return v;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p + i * 4, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p + i * 8, 8);
      return v;
    }
    default:
      QS_CHECK_MSG(false, "load_int needs an integer dtype");
  }
  return 0;
}

float load_float(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data);
  uint16_t h;
  switch (t.dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + i * 4, 4);
      return v;
    }
    case DType::kF16:
      std::memcpy(&h, p + i * 2, 2);
      return f16_to_f32(h);
    case DType::kBF16:
      std::memcpy(&h, p + i * 2, 2);
      return bf16_to_f32(h);
    default:
      QS_CHECK_MSG(false, "load_float needs F32, F16 or BF16");
  }
  return 0;
}

void store_float(const Tensor& t, int64_t i, float v) {
  char* p = t.mutable_ptr<char>();
  uint16_t h;
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(p + i * 4, &v, 4);
      return;
    case DType::kF16:
      h = f32_to_f16(v);
      std::memcpy(p + i * 2, &h, 2);
      return;
    case DType::kBF16:
      h = f32_to_bf16(v);
      std::memcpy(p + i * 2, &h, 2);
      return;
    default:
      QS_CHECK_MSG(false, "store_float needs F32, F16 or BF16");
  }
}

void unpack_stream(const uint32_t* words, int64_t count, int bits, uint8_t* out) {
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t bit = j * bits;
    const int64_t w = bit / 32;
    const int off = static_cast<int>(bit % 32);
    uint32_t v = words[w] >> off;
    if (off + bits > 32) v |= words[w + 1] << (32 - off);
    out[j] = static_cast<uint8_t>(v & mask);
  }
}

void pack_stream(const uint8_t* values, int64_t count, int bits, uint32_t* words) {
  for (int64_t j = 0; j < count; ++j) {
    const int64_t bit = j * bits;
    const int64_t w = bit / 32;
    const int off = static_cast<int>(bit % 32);
    const uint32_t v = values[j];
    words[w] |= v << off;
    if (off + bits > 32) words[w + 1] |= v >> (32 - off);
  }
}

void unpack_aligned(const uint32_t* words, int64_t count, int bits, uint8_t* out) {
  const int64_t per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t w = 0, j = 0; j < count; ++w) {
    const uint32_t word = words[w];
    for (int64_t i = 0; i < per_word && j < count; ++i, ++j) {
      out[j] = static_cast<uint8_t>((word >> (bits * i)) & mask);
    }
  }
}

void pack_aligned(const uint8_t* values, int64_t count, int bits, uint32_t* words) {
  const int64_t per_word = 32 / bits;
  for (int64_t w = 0, j = 0; j < count; ++w) {
    uint32_t word = words[w];
    for (int64_t i = 0; i < per_word && j < count; ++i, ++j) {
      word |= static_cast<uint32_t>(values[j]) << (bits * i);
    }
    words[w] = word;
  }
}

std::vector<uint32_t> gather_words(const Tensor& t, int64_t first, int64_t stride, int64_t count) {
  std::vector<uint32_t> words(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) words[i] = load_word(t, first + i * stride);
  return words;
}

void scatter_words(const std::vector<uint32_t>& words, const Tensor& t, int64_t first,
                   int64_t stride) {
  for (size_t i = 0; i < words.size(); ++i) {
    store_word(t, first + static_cast<int64_t>(i) * stride, words[i]);
  }
}

namespace {

bool exact_in(float v, DType t) {
  switch (t) {
    case DType::kF32:
      return true;
    case DType::kF16:
      return f16_to_f32(f32_to_f16(v)) == v;
    case DType::kBF16:
      return bf16_to_f32(f32_to_bf16(v)) == v;
    default:
      return false;
  }
}

}  // namespace

Status check_packable(const QuantScheme& scheme, const QuantizedWeight& w, int64_t group,
                      CodeType code_type, const char* what) {
  QS_RETURN_IF_ERROR(w.validate());
  if (w.code_type != code_type) {
    return invalid_argument(std::string(what) + " stores " +
                            (code_type == CodeType::kUint ? "unsigned integer" : "fp8 e4m3") +
                            " codes; this weight has " +
                            (w.code_type == CodeType::kUint ? "integer" : "fp8") + " codes");
  }
  if (w.bits != scheme.bits) {
    return invalid_argument(std::string(what) + ": the weight has " + std::to_string(w.bits) +
                            "-bit codes but the scheme says bits=" + std::to_string(scheme.bits));
  }
  if (w.group_size != group) {
    return invalid_argument(std::string(what) + ": the weight has groups of " +
                            std::to_string(w.group_size) + " columns but the scheme (" +
                            scheme.describe() + ") implies " + std::to_string(group) +
                            " for k=" + std::to_string(w.k));
  }
  if (w.scale_dtype != DType::kF32 && w.scale_dtype != DType::kF16 &&
      w.scale_dtype != DType::kBF16) {
    return invalid_argument(std::string(what) + ": scales cannot be stored as " +
                            dtype_name(w.scale_dtype) + " (F16, BF16 or F32)");
  }
  const int64_t g = w.n_groups();
  for (int64_t i = 0; i < w.n * g; ++i) {
    if (!exact_in(w.scales[i], w.scale_dtype)) {
      return invalid_argument(std::string(what) + ": scale [" + std::to_string(i / g) + ", " +
                              std::to_string(i % g) + "] = " + std::to_string(w.scales[i]) +
                              " is not exact in " + dtype_name(w.scale_dtype) +
                              "; round the scales before packing");
    }
  }
  return ok_status();
}

bool trivial_g_idx(const QuantizedWeight& w) {
  for (size_t c = 0; c < w.g_idx.size(); ++c) {
    if (w.g_idx[c] != static_cast<int64_t>(c) / w.group_size) return false;
  }
  return true;
}

const std::vector<DType>& scale_dtypes() {
  static const std::vector<DType> kScaleDTypes = {DType::kF16, DType::kBF16, DType::kF32};
  return kScaleDTypes;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace qs::formats
