// vision: Pillow's 8-bit bicubic and Lanczos resampling (see pil_resize.h). Every step follows
// Resample.c (Pillow 13.0.0): precompute_coeffs in double, normalize_coeffs_8bpc to fixed point,
// ImagingResampleHorizontal_8bpc / Vertical_8bpc accumulating in int from a half, clip8.
#include "vision/pil_resize.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace qs::vision {
namespace {

// 8 bits of result and 2 of headroom (the bicubic's negative lobes let a sum go past 255 or
// below 0) leave 22 bits for the weights' fraction.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;  // Keys' kernel, Pillow's and PIL's since 1.1.3
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
constexpr double kBicubicSupport = 2.0;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

// Pillow's lanczos_filter: a 3-lobed Lanczos window.
double lanczos(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}
constexpr double kLanczosSupport = 3.0;

// One output position's taps: the first source index and the fixed-point weights.
struct Taps {
  int64_t ksize = 0;
  std::vector<int64_t> first;   // [out_size]
  std::vector<int64_t> count;   // [out_size]
  std::vector<int32_t> weight;  // [out_size, ksize]
};

// precompute_coeffs over the whole input (the box (0, 0, in_size) as Pillow's floats), then
// normalize_coeffs_8bpc.
Taps precompute_taps(int64_t in_size, int64_t out_size, PilFilter filter) {
  double (*const kernel)(double) = filter == PilFilter::kLanczos ? lanczos : bicubic;
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support =
      (filter == PilFilter::kLanczos ? kLanczosSupport : kBicubicSupport) * filterscale;
  Taps t;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weight.assign(out_size * t.ksize, 0);
  std::vector<double> k(t.ksize);
  const double inv_filterscale = 1.0 / filterscale;
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    // (int) truncates toward zero, as in C; xmin is clamped at 0 right after.
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    xmin = std::max<int64_t>(xmin, 0);
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    xmax = std::min(xmax, in_size) - xmin;
    double ww = 0.0;
    std::fill(k.begin(), k.end(), 0.0);
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = kernel((x + xmin - center + 0.5) * inv_filterscale);
      k[x] = w;
      ww += w;
    }
    if (ww != 0.0) {
      for (int64_t x = 0; x < xmax; ++x) k[x] /= ww;
    }
    for (int64_t x = 0; x < t.ksize; ++x) {
      const double scaled = k[x] * (1 << kPrecisionBits);
      t.weight[xx * t.ksize + x] = static_cast<int32_t>(k[x] < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    t.first[xx] = xmin;
    t.count[xx] = xmax;
  }
  return t;
}

// Pillow's clip8: the sum's integer part (an arithmetic shift) clamped to [0, 255].
uint8_t clip8(int32_t sum) {
  return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255));
}

constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);

// One horizontal pass over `n_rows` rows of `in` starting at `row0`: [n_rows, out_w, ch].
std::vector<uint8_t> resample_rows(const uint8_t* in, int64_t width, int64_t row0, int64_t n_rows,
                                   int channels, const Taps& taps, int64_t out_width) {
  std::vector<uint8_t> out(n_rows * out_width * channels);
  for (int64_t y = 0; y < n_rows; ++y) {
    const uint8_t* line = in + (y + row0) * width * channels;
    uint8_t* o = out.data() + y * out_width * channels;
    for (int64_t xx = 0; xx < out_width; ++xx) {
      const int32_t* k = &taps.weight[xx * taps.ksize];
      const uint8_t* p = line + taps.first[xx] * channels;
      for (int c = 0; c < channels; ++c) {
        int32_t sum = kHalf;
        for (int64_t x = 0; x < taps.count[xx]; ++x) sum += p[x * channels + c] * k[x];
        o[xx * channels + c] = clip8(sum);
      }
    }
  }
  return out;
}

// One vertical pass; `row0` is the source row that row 0 of `in` holds.
std::vector<uint8_t> resample_columns(const uint8_t* in, int64_t width, int64_t row0, int channels,
                                      const Taps& taps, int64_t out_height) {
  const int64_t stride = width * channels;
  std::vector<uint8_t> out(out_height * stride);
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &taps.weight[yy * taps.ksize];
    const uint8_t* col = in + (taps.first[yy] - row0) * stride;
    uint8_t* o = out.data() + yy * stride;
    for (int64_t i = 0; i < stride; ++i) {
      int32_t sum = kHalf;
      for (int64_t y = 0; y < taps.count[yy]; ++y) sum += col[y * stride + i] * k[y];
      o[i] = clip8(sum);
    }
  }
  return out;
}

}  // namespace

std::vector<uint8_t> pil_resize(const std::vector<uint8_t>& pixels, int64_t width, int64_t height,
                                int channels, int64_t out_width, int64_t out_height,
                                PilFilter filter) {
  QS_CHECK(width > 0 && height > 0 && out_width > 0 && out_height > 0 && channels > 0);
  QS_CHECK(static_cast<int64_t>(pixels.size()) == width * height * channels);
  if (width == out_width && height == out_height) return pixels;  // Image.resize copies
  const bool horizontal = out_width != width, vertical = out_height != height;
  const Taps vert = precompute_taps(height, out_height, filter);
  if (!horizontal) return resample_columns(pixels.data(), width, 0, channels, vert, out_height);
  const Taps horiz = precompute_taps(width, out_width, filter);
  if (!vertical) {
    return resample_rows(pixels.data(), width, 0, height, channels, horiz, out_width);
  }
  // Pillow 13 runs the vertical pass first when the height shrinks by more than twice as many
  // pixels as the width does (ImagingResampleInner's horizontal_first); earlier Pillows always
  // ran the horizontal one first. Each pass rounds to uint8, so the order shows in the bytes.
  const int64_t dh = height - out_height, dw = width - out_width;
  if (dh > 0 && dh > dw * 2) {
    const std::vector<uint8_t> temp =
        resample_columns(pixels.data(), width, 0, channels, vert, out_height);
    return resample_rows(temp.data(), width, 0, out_height, channels, horiz, out_width);
  }
  // Horizontally first, over only the source rows the vertical pass will read.
  const int64_t row_first = vert.first[0];
  const int64_t row_last = vert.first[out_height - 1] + vert.count[out_height - 1];
  const std::vector<uint8_t> temp = resample_rows(pixels.data(), width, row_first,
                                                  row_last - row_first, channels, horiz, out_width);
  return resample_columns(temp.data(), out_width, row_first, channels, vert, out_height);
}

std::vector<uint8_t> pil_resize_bicubic(const std::vector<uint8_t>& pixels, int64_t width,
                                        int64_t height, int channels, int64_t out_width,
                                        int64_t out_height) {
  return pil_resize(pixels, width, height, channels, out_width, out_height, PilFilter::kBicubic);
}

}  // namespace qs::vision
