// ops: 3-D convolution as im2col + GEMM in per-thread bands (see conv3d.h).
#include "ops/conv3d.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ops/gemm.h"
#include "ops/platform.h"

namespace qs::ops {

namespace {

// One thread's column buffer: [c_in * kt * kh * kw, band] floats. 4 MB keeps it near the
// core's share of the last-level cache while a band of a 96-channel 3x3x3 convolution (2592
// rows) still spans ~400 output positions, enough for the GEMM's panels. The buffers live for
// one call: a video VAE runs few, long convolutions, so keeping them (as the GEMM keeps its
// packing buffers) would only hold memory between calls.
constexpr int64_t kBandFloats = int64_t{1} << 20;
// Fewer columns than this would make the GEMM re-pack its weight panel for too little work;
// more than this would make it pack a B panel (columns x 256 floats) past a few MB.
constexpr int64_t kMinBandColumns = 192;
constexpr int64_t kMaxBandColumns = 4096;
// gemm_hwy.cc's packing per call, for conv3d_scratch: B panels of kKC = 256 rows over
// the columns rounded up to kMaxNR = 32, and one kMC x kKC = 192 x 256 block of A.
constexpr int64_t kGemmPackRows = 256, kGemmPackWidth = 32, kGemmPackBlockRows = 192;

std::string conv3d_shape_text(const Conv3dShape& s) {
  auto n = [](int64_t v) { return std::to_string(v); };
  return "input [" + n(s.n) + ", " + n(s.c_in) + ", " + n(s.t) + ", " + n(s.h) + ", " + n(s.w) +
         "], weight [" + n(s.c_out) + ", " + n(s.c_in) + ", " + n(s.kt) + ", " + n(s.kh) + ", " +
         n(s.kw) + "], stride (" + n(s.stride_t) + ", " + n(s.stride_h) + ", " + n(s.stride_w) +
         "), padding (" + n(s.pad_front) + ", " + n(s.pad_back) + ", " + n(s.pad_top) + ", " +
         n(s.pad_bottom) + ", " + n(s.pad_left) + ", " + n(s.pad_right) + ")";
}

// cols[(ci, a, u, v), p - p0] = x[ci, f * st + a - pad_front, i * sh + u - pad_top,
// j * sw + v - pad_left] for the output positions p = (f, i, j) in [p0, p1), zero outside x.
void unfold(const float* x, const Conv3dShape& s, int64_t p0, int64_t p1, float* cols) {
  const int64_t oh = s.out_h(), ow = s.out_w(), np = p1 - p0, hw = s.h * s.w;
  float* col = cols;
  for (int64_t ci = 0; ci < s.c_in; ++ci) {
    for (int64_t a = 0; a < s.kt; ++a) {
      for (int64_t u = 0; u < s.kh; ++u) {
        for (int64_t v = 0; v < s.kw; ++v, col += np) {
          // Walk [p0, p1) one output row (fixed f, i) at a time.
          int64_t p = p0;
          while (p < p1) {
            const int64_t f = p / (oh * ow), i = (p / ow) % oh, j0 = p % ow;
            const int64_t j1 = std::min(ow, j0 + (p1 - p));
            float* dst = col + (p - p0);
            const int64_t tt = f * s.stride_t + a - s.pad_front;
            const int64_t r = i * s.stride_h + u - s.pad_top;
            if (tt < 0 || tt >= s.t || r < 0 || r >= s.h) {
              std::fill(dst, dst + (j1 - j0), 0.0f);
            } else {
              const float* src = x + (ci * s.t + tt) * hw + r * s.w;
              const int64_t shift = v - s.pad_left;
              if (s.stride_w == 1) {
                // q = j + shift must lie in [0, w): a copy between two runs of zeros.
                const int64_t lo = std::clamp(-shift, j0, j1), hi = std::clamp(s.w - shift, lo, j1);
                std::fill(dst, dst + (lo - j0), 0.0f);
                std::memcpy(dst + (lo - j0), src + lo + shift,
                            static_cast<size_t>(hi - lo) * sizeof(float));
                std::fill(dst + (hi - j0), dst + (j1 - j0), 0.0f);
              } else {
                for (int64_t j = j0; j < j1; ++j) {
                  const int64_t q = j * s.stride_w + shift;
                  dst[j - j0] = (q < 0 || q >= s.w) ? 0.0f : src[q];
                }
              }
            }
            p += j1 - j0;
          }
        }
      }
    }
  }
}

bool is_pointwise(const Conv3dShape& s) {
  return s.kt == 1 && s.kh == 1 && s.kw == 1 && s.stride_t == 1 && s.stride_h == 1 &&
         s.stride_w == 1 && s.pad_front == 0 && s.pad_back == 0 && s.pad_top == 0 &&
         s.pad_bottom == 0 && s.pad_left == 0 && s.pad_right == 0;
}

// Output positions per band: the column budget, and at least one band per thread where there
// are enough positions.
int64_t band_columns(const Conv3dShape& s, int threads) {
  const int64_t out_pos = s.out_t() * s.out_h() * s.out_w();
  int64_t band =
      std::clamp(kBandFloats / (s.c_in * s.kt * s.kh * s.kw), kMinBandColumns, kMaxBandColumns);
  if (threads > 1) band = std::min(band, (s.n * out_pos + threads - 1) / threads);
  return std::clamp<int64_t>(band, 1, out_pos);
}

}  // namespace

Conv3dScratch conv3d_scratch(const Conv3dShape& s, int threads) {
  const int64_t band = band_columns(s, threads);
  const int64_t panel = (band + kGemmPackWidth - 1) / kGemmPackWidth * kGemmPackWidth;
  return {is_pointwise(s) ? 0 : s.c_in * s.kt * s.kh * s.kw * band,
          (panel + kGemmPackBlockRows) * kGemmPackRows};
}

Status conv3d(const float* x, const Conv3dShape& s, const float* weight, const float* bias,
              float* y, ThreadPool& pool) {
  if (s.n <= 0 || s.c_in <= 0 || s.t <= 0 || s.h <= 0 || s.w <= 0 || s.c_out <= 0 || s.kt <= 0 ||
      s.kh <= 0 || s.kw <= 0 || s.stride_t <= 0 || s.stride_h <= 0 || s.stride_w <= 0 ||
      s.pad_front < 0 || s.pad_back < 0 || s.pad_top < 0 || s.pad_bottom < 0 || s.pad_left < 0 ||
      s.pad_right < 0 || s.t + s.pad_front + s.pad_back < s.kt ||
      s.h + s.pad_top + s.pad_bottom < s.kh || s.w + s.pad_left + s.pad_right < s.kw) {
    return invalid_argument("conv3d: bad shape: " + conv3d_shape_text(s));
  }
  const int64_t out_pos = s.out_t() * s.out_h() * s.out_w();
  const int64_t in_size = s.c_in * s.t * s.h * s.w, kk = s.c_in * s.kt * s.kh * s.kw;
  // A 1x1x1 convolution without stride or padding is the product W[c_out, c_in] x[c_in, thw].
  const bool pointwise = is_pointwise(s);
  const int threads = pool.n_threads();
  const bool parallel = threads > 1 && s.n * out_pos * kk * s.c_out >= kMinParallelMacs;
  const int64_t band = band_columns(s, parallel ? threads : 1);
  const int64_t bands_per_item = (out_pos + band - 1) / band, units = s.n * bands_per_item;

  auto run_unit = [&](int64_t unit, std::vector<float>* scratch) -> Status {
    const int64_t b = unit / bands_per_item, p0 = (unit % bands_per_item) * band;
    const int64_t np = std::min(band, out_pos - p0);
    const float* xb = x + b * in_size;
    float* yb = y + b * s.c_out * out_pos + p0;
    for (int64_t co = 0; co < s.c_out; ++co) {
      std::fill(yb + co * out_pos, yb + co * out_pos + np, bias ? bias[co] : 0.0f);
    }
    const float* cols = xb + p0;
    int64_t ldb = out_pos;
    if (!pointwise) {
      scratch->resize(static_cast<size_t>(kk * band));
      unfold(xb, s, p0, p0 + np, scratch->data());
      cols = scratch->data();
      ldb = np;
    }
    // y[co, p0 .. p0 + np) += W[co, kk] * cols[kk, np]; rows of y are out_pos apart.
    const kernels::GemmArgs args{weight, kk, 1, cols, ldb, yb, out_pos, s.c_out, np, kk, true};
    return gemm(args, nullptr);
  };

  if (!parallel) {
    std::vector<float> scratch;
    for (int64_t u = 0; u < units; ++u) QS_RETURN_IF_ERROR(run_unit(u, &scratch));
    return ok_status();
  }
  std::atomic<int64_t> next{0};
  std::mutex error_mu;
  Status error = ok_status();
  pool.run([&](int, int) {
    std::vector<float> scratch;
    for (int64_t u = next.fetch_add(1); u < units; u = next.fetch_add(1)) {
      Status st = run_unit(u, &scratch);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (error.ok()) error = std::move(st);
        return;
      }
    }
  });
  return error;
}

}  // namespace qs::ops
