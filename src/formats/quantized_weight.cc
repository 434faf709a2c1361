// formats: QuantizedWeight's checks and the reference dequantization (quantized_weight.h).
// validate() is the last gate between a checkpoint's bytes and the kernels: everything the
// kernels index with (codes, zeros, g_idx) is range-checked here, once, at load.
#include "formats/quantized_weight.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"

namespace qs::formats {
namespace {

std::string at(int64_t row, int64_t col) {
  return "[" + std::to_string(row) + ", " + std::to_string(col) + "]";
}

// e4m3fn has no infinities; its only NaN is S.1111.111 (0x7f / 0xff).
bool fp8_e4m3_is_nan(uint8_t code) {
  return (code & 0x7f) == 0x7f;
}

}  // namespace

Status QuantizedWeight::validate() const {
  if (n <= 0 || k <= 0) {
    return data_loss("quantized weight has shape [" + std::to_string(n) + ", " + std::to_string(k) +
                     "]");
  }
  if (bits < 1 || bits > 8) return data_loss("quantized weight has bits=" + std::to_string(bits));
  if (code_type == CodeType::kFp8E4m3 && bits != 8) {
    return data_loss("fp8 codes need bits=8, found " + std::to_string(bits));
  }
  if (group_size <= 0) {
    return data_loss("quantized weight has group_size=" + std::to_string(group_size));
  }
  const int64_t g = n_groups();
  if (static_cast<int64_t>(codes.size()) != n * k) {
    return data_loss("codes hold " + std::to_string(codes.size()) +
                     " values, expected n*k = " + std::to_string(n * k));
  }
  if (static_cast<int64_t>(scales.size()) != n * g || static_cast<int64_t>(zeros.size()) != n * g) {
    return data_loss("scales/zeros hold " + std::to_string(scales.size()) + "/" +
                     std::to_string(zeros.size()) +
                     " values, expected n*groups = " + std::to_string(n * g));
  }
  if (!g_idx.empty() && static_cast<int64_t>(g_idx.size()) != k) {
    return data_loss("g_idx has " + std::to_string(g_idx.size()) +
                     " entries, expected k = " + std::to_string(k));
  }
  for (int64_t c = 0; c < static_cast<int64_t>(g_idx.size()); ++c) {
    if (g_idx[c] < 0 || g_idx[c] >= g) {
      return data_loss("g_idx[" + std::to_string(c) + "] = " + std::to_string(g_idx[c]) +
                       " is outside [0, " + std::to_string(g) + ") (k=" + std::to_string(k) +
                       ", group_size=" + std::to_string(group_size) + ")");
    }
  }
  if (code_type == CodeType::kUint) {
    const int32_t levels = 1 << bits;
    // One branch-free pass (the loader runs this on every weight), then find the culprit.
    uint8_t max_code = 0;
    for (uint8_t c : codes) max_code = std::max(max_code, c);
    for (int64_t i = 0; max_code >= levels && i < n * k; ++i) {
      if (codes[i] >= levels) {
        return data_loss("code " + at(i / k, i % k) + " = " + std::to_string(codes[i]) +
                         " does not fit " + std::to_string(bits) + " bits");
      }
    }
    // GPTQ v1 stores zero-1 and adds 1 back unmasked, so 2^bits itself is a legal zero.
    for (int64_t i = 0; i < n * g; ++i) {
      if (zeros[i] < 0 || zeros[i] > levels) {
        return data_loss("zero " + at(i / g, i % g) + " = " + std::to_string(zeros[i]) +
                         " is outside [0, " + std::to_string(levels) + "]");
      }
    }
  } else {
    for (int64_t i = 0; i < n * k; ++i) {
      if (fp8_e4m3_is_nan(codes[i])) return data_loss("fp8 code " + at(i / k, i % k) + " is NaN");
    }
    for (int64_t i = 0; i < n * g; ++i) {
      if (zeros[i] != 0) return data_loss("fp8 weight has a nonzero zero at " + at(i / g, i % g));
    }
  }
  for (int64_t i = 0; i < n * g; ++i) {
    if (!std::isfinite(scales[i])) {
      return data_loss("scale " + at(i / g, i % g) + " is " + std::to_string(scales[i]));
    }
  }
  return ok_status();
}

void dequantize(const QuantizedWeight& w, float* out) {
  QS_CHECK(w.group_size > 0);
  const int64_t g = w.n_groups();
  for (int64_t r = 0; r < w.n; ++r) {
    const float* scales = w.scales.data() + r * g;
    const int32_t* zeros = w.zeros.data() + r * g;
    const uint8_t* codes = w.codes.data() + r * w.k;
    float* o = out + r * w.k;
    if (w.code_type == CodeType::kFp8E4m3) {
      for (int64_t c = 0; c < w.k; ++c) o[c] = scales[w.group_of(c)] * fp8_e4m3_to_f32(codes[c]);
    } else {
      for (int64_t c = 0; c < w.k; ++c) {
        const int32_t gi = w.group_of(c);
        o[c] = scales[gi] * static_cast<float>(static_cast<int32_t>(codes[c]) - zeros[gi]);
      }
    }
  }
}

QuantizedWeight slice_rows(const QuantizedWeight& w, int64_t r0, int64_t rows) {
  QS_CHECK(r0 >= 0 && rows > 0 && r0 + rows <= w.n);
  QuantizedWeight s = w;
  const int64_t g = w.n_groups();
  s.n = rows;
  s.codes.assign(w.codes.begin() + r0 * w.k, w.codes.begin() + (r0 + rows) * w.k);
  s.scales.assign(w.scales.begin() + r0 * g, w.scales.begin() + (r0 + rows) * g);
  s.zeros.assign(w.zeros.begin() + r0 * g, w.zeros.begin() + (r0 + rows) * g);
  return s;
}

Result<QuantizedWeight> slice_cols(const QuantizedWeight& w, int64_t c0, int64_t cols) {
  QS_CHECK(c0 >= 0 && cols > 0 && c0 + cols <= w.k);
  if (!w.g_idx.empty()) {
    return unimplemented("an act-order weight (g_idx) cannot be split along its " +
                         std::to_string(w.k) + " input columns: its groups are scattered");
  }
  const int64_t g = w.n_groups(), end = c0 + cols;
  // A single group spanning all of k (per-channel or per-tensor scales) splits anywhere.
  const bool one_group = g == 1;
  if (!one_group && (c0 % w.group_size != 0 || (end != w.k && end % w.group_size != 0))) {
    return invalid_argument("input columns [" + std::to_string(c0) + ", " + std::to_string(end) +
                            ") of " + std::to_string(w.k) + " would cut a quantization group of " +
                            std::to_string(w.group_size) + " columns");
  }
  QuantizedWeight s = w;
  s.k = cols;
  if (one_group) s.group_size = std::max<int64_t>(cols, 1);
  const int64_t g0 = one_group ? 0 : c0 / w.group_size;
  const int64_t sg = s.n_groups();
  s.codes.resize(w.n * cols);
  s.scales.resize(w.n * sg);
  s.zeros.resize(w.n * sg);
  for (int64_t r = 0; r < w.n; ++r) {
    std::copy_n(w.codes.begin() + r * w.k + c0, cols, s.codes.begin() + r * cols);
    std::copy_n(w.scales.begin() + r * g + g0, sg, s.scales.begin() + r * sg);
    std::copy_n(w.zeros.begin() + r * g + g0, sg, s.zeros.begin() + r * sg);
  }
  return s;
}

}  // namespace qs::formats
