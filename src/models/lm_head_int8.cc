// models: the run-time int8 lm_head (see lm_head_int8.h).
#include "models/lm_head_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/log.h"
#include "core/units_text.h"
#include "formats/quant_scheme.h"
#include "ops/quant_matrix.h"

namespace qs::models {

Status check_lm_head_dtype(const std::string& name) {
  if (name.empty() || name == "auto" || name == "int8") return ok_status();
  return invalid_argument("lm_head dtype '" + name + "' is not supported: choose auto or int8");
}

Result<formats::QuantizedWeight> quantize_int8_rows(const Tensor& w, ThreadPool& pool) {
  formats::QuantizedWeight q;
  q.n = w.dim(0);
  q.k = w.dim(1);
  q.bits = 8;
  q.group_size = q.k;
  q.scale_dtype = DType::kF32;
  q.codes.resize(static_cast<size_t>(q.n * q.k));
  q.scales.resize(static_cast<size_t>(q.n));
  q.zeros.assign(static_cast<size_t>(q.n), 128);
  const int64_t k = q.k;
  std::atomic<int64_t> bad_row{-1};
  pool.parallel_for(q.n, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = begin; r < end; ++r) {
      if (w.dtype == DType::kBF16) {
        const uint16_t* src = w.ptr<const uint16_t>() + r * k;
        for (int64_t j = 0; j < k; ++j) row[j] = bf16_to_f32(src[j]);
      } else {
        for (int64_t j = 0; j < k; ++j) row[j] = load_as_f32(w.dtype, w.data, r * k + j);
      }
      float amax = 0.0f;
      bool finite = true;
      for (float v : row) {
        finite = finite && std::isfinite(v);
        amax = std::max(amax, std::fabs(v));
      }
      if (!finite) {
        bad_row = r;
        continue;
      }
      const float scale = amax / 127.0f;
      q.scales[r] = scale;
      uint8_t* codes = q.codes.data() + r * k;
      for (int64_t j = 0; j < k; ++j) {
        // nearbyint rounds half to even in the default rounding mode, as torch.round does.
        const float c = scale > 0.0f ? std::nearbyint(row[j] / scale) : 0.0f;
        codes[j] = static_cast<uint8_t>(std::clamp(c, -127.0f, 127.0f) + 128.0f);
      }
    }
  });
  if (bad_row >= 0) {
    return invalid_argument("row " + std::to_string(bad_row.load()) +
                            " holds a non-finite value, which int8 cannot represent");
  }
  return q;
}

Status make_int8_lm_head(const std::string& dir, ops::LinearWeight* head) {
  if (head->quant != nullptr) {
    QS_LOG_INFO("%s: lm_head is stored quantized (%s); --lm-head-dtype int8 leaves it as it is",
                dir.c_str(), head->quant->scheme().describe().c_str());
    return ok_status();
  }
  const Tensor& dense = head->dense;
  const size_t before = head->resident_bytes();
  Result<formats::QuantizedWeight> rounded = invalid_argument("");
  {
    ThreadPool pool(ThreadPool::default_threads());
    rounded = quantize_int8_rows(dense, pool);
  }
  if (!rounded.ok()) {
    return invalid_argument(dir + ": lm_head cannot be made int8 (--lm-head-dtype int8): " +
                            rounded.status().message());
  }
  const formats::QuantizedWeight& q = *rounded;
  // Reported as what it is: int8 per channel, symmetric, weight-only (the int8-activation
  // kernels quantize x themselves).
  formats::QuantScheme scheme;
  scheme.layout = formats::Layout::kCtInt;
  scheme.bits = 8;
  scheme.group_size = -1;
  QS_ASSIGN_OR_RETURN(std::shared_ptr<const ops::QuantMatrix> m, ops::QuantMatrix::make(scheme, q));
  QS_LOG_INFO(
      "%s: lm_head [%lld, %lld] made int8 per row at load (--lm-head-dtype int8): %s resident "
      "instead of %s as %s; the embedding lookups are unchanged",
      dir.c_str(), static_cast<long long>(q.n), static_cast<long long>(q.k),
      bytes_text(m->resident_bytes()).c_str(), bytes_text(before).c_str(), dtype_name(dense.dtype));
  *head = ops::LinearWeight(std::move(m));
  return ok_status();
}

}  // namespace qs::models
