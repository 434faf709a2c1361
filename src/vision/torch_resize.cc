// vision: torchvision's uint8 BICUBIC resize (see torch_resize.h), after torch's CPU kernel
// for antialiased uint8 upsampling (UpSampleKernel.cpp: _compute_index_ranges_weights,
// _compute_index_ranges_int16_weights; the AVX2 and the generic loops give the same bytes):
// Keys' cubic (a = -0.5) widened by the scale when shrinking, weights normalised in double,
// scaled to int16 at the largest precision that keeps the largest weight below 2^15, each pass
// accumulating in int from one half and saturating to uint8; horizontal first.
#include "vision/torch_resize.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace qs::vision {
namespace {

// torch's cubic_convolution1 / cubic_convolution2 with A = -0.5 (its antialias filter, chosen
// to match PIL); the operation order is torch's, which rounds differently from Pillow's.
double torch_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

// One axis: for each output position the first input index, the tap count and the weights.
struct TorchTaps {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;  // [out_size]
  std::vector<int32_t> weight;        // [out_size, ksize], int16 values
  int precision = 0;                  // fraction bits of the weights
};

TorchTaps torch_taps(int64_t in_size, int64_t out_size) {
  // area_pixel_compute_scale without a scale factor: in / out in double.
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;  // interp_size 4, halved
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  TorchTaps t;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  std::vector<double> w(out_size * t.ksize, 0.0);
  double w_max = 0.0;
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xsize = std::clamp<int64_t>(
        std::min(static_cast<int64_t>(center + support + 0.5), in_size) - xmin, 0, t.ksize);
    double* wi = &w[i * t.ksize];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      wi[j] = torch_cubic((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        wi[j] /= total;
        w_max = std::max(w_max, wi[j]);
      }
    }
    t.first[i] = xmin;
    t.count[i] = xsize;
  }
  // The most fraction bits (below 22) that keep the largest weight within int16.
  for (t.precision = 0; t.precision < 22; ++t.precision) {
    const int next = static_cast<int>(0.5 + w_max * static_cast<double>(1 << (t.precision + 1)));
    if (next >= (1 << 15)) break;
  }
  t.weight.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * static_cast<double>(1 << t.precision);
    t.weight[k] =
        static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return t;
}

// The horizontal pass: each row's `channels`-interleaved samples, `in_width` to t's output.
void torch_pass_rows(const uint8_t* src, uint8_t* dst, const TorchTaps& t, int64_t in_width,
                     int64_t out_width, int64_t rows, int channels) {
  QS_CHECK(t.precision > 0);
  const int32_t half = 1 << (t.precision - 1);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* s = src + y * in_width * channels;
    uint8_t* d = dst + y * out_width * channels;
    for (int64_t i = 0; i < out_width; ++i) {
      const int32_t* wi = &t.weight[i * t.ksize];
      const uint8_t* base = s + t.first[i] * channels;
      for (int c = 0; c < channels; ++c) {
        int32_t acc = half;
        for (int64_t j = 0; j < t.count[i]; ++j) acc += base[j * channels + c] * wi[j];
        d[i * channels + c] = static_cast<uint8_t>(std::clamp(acc >> t.precision, 0, 255));
      }
    }
  }
}

// The vertical pass: whole rows of `row_len` samples weighted and summed, so that memory is
// read in order.
void torch_pass_columns(const uint8_t* src, uint8_t* dst, const TorchTaps& t, int64_t out_height,
                        int64_t row_len) {
  QS_CHECK(t.precision > 0);
  const int32_t half = 1 << (t.precision - 1);
  std::vector<int32_t> acc(row_len);
  for (int64_t i = 0; i < out_height; ++i) {
    std::fill(acc.begin(), acc.end(), half);
    const int32_t* wi = &t.weight[i * t.ksize];
    for (int64_t j = 0; j < t.count[i]; ++j) {
      const uint8_t* row = src + (t.first[i] + j) * row_len;
      const int32_t w = wi[j];
      for (int64_t k = 0; k < row_len; ++k) acc[k] += row[k] * w;
    }
    uint8_t* d = dst + i * row_len;
    for (int64_t k = 0; k < row_len; ++k) {
      d[k] = static_cast<uint8_t>(std::clamp(acc[k] >> t.precision, 0, 255));
    }
  }
}

}  // namespace

std::vector<uint8_t> torch_resize_bicubic(const std::vector<uint8_t>& src, int64_t width,
                                          int64_t height, int channels, int64_t out_width,
                                          int64_t out_height) {
  QS_CHECK(width > 0 && height > 0 && out_width > 0 && out_height > 0 && channels > 0);
  QS_CHECK(static_cast<int64_t>(src.size()) == width * height * channels);
  if (width == out_width && height == out_height) return src;
  std::vector<uint8_t> cur = src;
  if (out_width != width) {
    std::vector<uint8_t> next(out_width * height * channels);
    torch_pass_rows(cur.data(), next.data(), torch_taps(width, out_width), width, out_width, height,
                    channels);
    cur = std::move(next);
  }
  if (out_height != height) {
    std::vector<uint8_t> next(out_width * out_height * channels);
    torch_pass_columns(cur.data(), next.data(), torch_taps(height, out_height), out_height,
                       out_width * channels);
    cur = std::move(next);
  }
  return cur;
}

}  // namespace qs::vision
