// The FP8 W8A8 path of the CUDA backend (kernels/cuda/fp8_gemm.h) on a GPU: the activation
// quantizer bit for bit against its host reference (dynamic per-token and static scales, any
// sm_80+ GPU), the refusal below sm_89, and the cuBLASLt product with per-tensor and
// per-channel weight scales, per-token and static activation scales, f32 and bf16 outputs, at
// m = 1, 7, 16, 64, 512, against fp8_gemm_ref. Skipped without a GPU.
//
// Tolerance of the product: the e4m3 operands are exact, so the f32 accumulation order (and
// the FP8 tensor cores' accumulator, which on Hopper keeps fewer bits between promotions) is
// the only difference: |y - ref| <= 1e-3 * sum_c |products| (a transposed or misscaled
// operand is off by about |ref|, some 3e-2 of that sum at k = 1024), plus half a bf16 step of
// |ref| for bf16 outputs.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "cuda_device_buffer.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_scales.h"

namespace qs::kernels::cuda {
namespace {

constexpr size_t kWorkspace = 32u << 20;

std::vector<uint16_t> random_bf16(size_t count, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<uint16_t> v(count);
  for (uint16_t& b : v) b = f32_to_bf16(normal(rng));
  return v;
}

class Fp8Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    QS_SKIP_WITHOUT_GPU();
    QS_ASSERT_CUDA(device_info(0, &info_));
  }
  bool has_fp8() const { return fp8_gemm_supported(info_.cc_major, info_.cc_minor); }
  DeviceInfo info_;
};

TEST_F(Fp8Gpu, QuantizeRowsMatchesHostReference) {
  for (int64_t m : {1, 7, 64}) {
    for (int64_t k : {64, 1000, 4096}) {
      std::vector<uint16_t> xb =
          random_bf16(static_cast<size_t>(m * k), 3.0f, static_cast<uint32_t>(m * k));
      // A zero row, and a row below the scale's floor.
      if (m > 2) {
        for (int64_t c = 0; c < k; ++c) {
          xb[static_cast<size_t>(k + c)] = 0;
          xb[static_cast<size_t>(2 * k + c)] =
              f32_to_bf16(bf16_to_f32(xb[static_cast<size_t>(2 * k + c)]) * 1e-6f);
        }
      }
      for (bool dynamic : {true, false}) {
        SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k) +
                     (dynamic ? " dynamic" : " static"));
        const float input_scale = 0.0123f;  // saturates the larger values of x
        std::vector<uint8_t> want_q(xb.size());
        std::vector<float> want_s(static_cast<size_t>(m));
        fp8_quantize_rows_ref(xb.data(), m, k, dynamic ? nullptr : &input_scale, want_q.data(),
                              want_s.data());
        DeviceBuffer x, q, s, st;
        QS_ASSERT_CUDA(x.upload(xb));
        QS_ASSERT_CUDA(q.alloc(xb.size()));
        QS_ASSERT_CUDA(s.alloc(static_cast<size_t>(m) * 4));
        QS_ASSERT_CUDA(st.upload(std::vector<float>{input_scale}));
        QS_ASSERT_CUDA(fp8_quantize_rows(x.as<uint16_t>(), m, k, dynamic ? nullptr : st.as<float>(),
                                         q.as<uint8_t>(), s.as<float>(), nullptr));
        QS_ASSERT_CUDA(device_synchronize());
        std::vector<uint8_t> got_q;
        std::vector<float> got_s;
        QS_ASSERT_CUDA(q.download(&got_q));
        QS_ASSERT_CUDA(s.download(&got_s));
        EXPECT_EQ(got_s, want_s);
        EXPECT_EQ(got_q, want_q);
      }
    }
  }
}

TEST_F(Fp8Gpu, RefusedBelowSm89) {
  std::unique_ptr<Fp8Gemm> gemm;
  const CudaStatus s = Fp8Gemm::create(kWorkspace, &gemm);
  if (has_fp8()) {
    EXPECT_TRUE(s.ok()) << s.message;
  } else {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message.find("8.9"), std::string::npos) << s.message;
  }
}

struct ProductCase {
  bool w_per_channel;
  bool x_dynamic;
  bool y_bf16;
};

class Fp8GemmGpu : public Fp8Gpu, public ::testing::WithParamInterface<ProductCase> {};

TEST_P(Fp8GemmGpu, MatchesHostReference) {
  if (!has_fp8())
    GTEST_SKIP() << "the FP8 GEMM needs sm_89+, device is sm_" << info_.cc_major << info_.cc_minor;
  const ProductCase& c = GetParam();
  const int64_t n = 256, k = 1024;
  std::unique_ptr<Fp8Gemm> gemm;
  QS_ASSERT_CUDA(Fp8Gemm::create(kWorkspace, &gemm));

  // Weights quantized per row (amax / 448) or with one scale, as checkpoints store them.
  const std::vector<uint16_t> wsrc = random_bf16(static_cast<size_t>(n * k), 0.05f, 3u);
  std::vector<float> row_scales(static_cast<size_t>(n));
  float tensor_amax = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0.0f;
    for (int64_t col = 0; col < k; ++col) {
      amax = std::max(amax, std::fabs(bf16_to_f32(wsrc[static_cast<size_t>(j * k + col)])));
    }
    row_scales[static_cast<size_t>(j)] = amax / kE4m3Max;
    tensor_amax = std::max(tensor_amax, amax);
  }
  if (!c.w_per_channel) row_scales.assign(static_cast<size_t>(n), tensor_amax / kE4m3Max);
  std::vector<uint8_t> qw(wsrc.size());
  for (int64_t i = 0; i < n * k; ++i) {
    qw[static_cast<size_t>(i)] =
        f32_to_fp8_e4m3(bf16_to_f32(wsrc[static_cast<size_t>(i)]) / row_scales[i / k]);
  }
  const Fp8WeightScales ws = fp8_weight_scales(row_scales.data(), n);
  ASSERT_EQ(ws.per_channel, c.w_per_channel);
  DeviceBuffer dqw, dsw;
  QS_ASSERT_CUDA(dqw.upload(qw));
  QS_ASSERT_CUDA(dsw.upload(ws.values));

  for (int64_t m : {1, 7, 16, 64, 512}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const std::vector<uint16_t> xb =
        random_bf16(static_cast<size_t>(m * k), 2.0f, static_cast<uint32_t>(m));
    const float input_scale = 8.0f / kE4m3Max;  // a calibrated static scale: amax ~8
    std::vector<uint8_t> qx(xb.size());
    std::vector<float> sx(static_cast<size_t>(m));
    fp8_quantize_rows_ref(xb.data(), m, k, c.x_dynamic ? nullptr : &input_scale, qx.data(),
                          sx.data());
    std::vector<float> ref(static_cast<size_t>(m * n)), mag(ref.size());
    fp8_gemm_ref(qx.data(), sx.data(), c.x_dynamic, qw.data(), ws, m, n, k, ref.data(), mag.data());

    // The GPU quantizes x itself (bit for bit the reference, tested above).
    DeviceBuffer x, dqx, dsx, dst, y, scratch;
    QS_ASSERT_CUDA(x.upload(xb));
    QS_ASSERT_CUDA(dqx.alloc(xb.size()));
    QS_ASSERT_CUDA(dsx.alloc(static_cast<size_t>(m) * 4));
    QS_ASSERT_CUDA(dst.upload(std::vector<float>{input_scale}));
    QS_ASSERT_CUDA(fp8_quantize_rows(x.as<uint16_t>(), m, k,
                                     c.x_dynamic ? nullptr : dst.as<float>(), dqx.as<uint8_t>(),
                                     dsx.as<float>(), nullptr));
    QS_ASSERT_CUDA(y.alloc(static_cast<size_t>(m * n) * (c.y_bf16 ? 2 : 4)));

    Fp8GemmArgs a;
    a.qx = dqx.as<uint8_t>();
    a.x_per_token = c.x_dynamic;
    a.x_scales = c.x_dynamic ? dsx.as<float>() : dst.as<float>();
    a.qw = dqw.as<uint8_t>();
    a.w_scales = dsw.as<float>();
    a.w_per_channel = ws.per_channel;
    a.m = m;
    a.n = n;
    a.k = k;
    a.y = y.as<void>();
    a.y_bf16 = c.y_bf16;
    if (fp8_gemm_needs_scratch(a)) {
      QS_ASSERT_CUDA(scratch.alloc(static_cast<size_t>(m * n) * 4));
      a.scratch = scratch.as<float>();
    }
    QS_ASSERT_CUDA(gemm->linear(a, nullptr));
    QS_ASSERT_CUDA(device_synchronize());

    std::vector<uint8_t> out;
    QS_ASSERT_CUDA(y.download(&out));
    for (int64_t i = 0; i < m * n; ++i) {
      float got;
      if (c.y_bf16) {
        uint16_t b;
        std::memcpy(&b, out.data() + i * 2, 2);
        got = bf16_to_f32(b);
      } else {
        std::memcpy(&got, out.data() + i * 4, 4);
      }
      const double want = ref[static_cast<size_t>(i)];
      const double tol =
          1e-3 * mag[static_cast<size_t>(i)] + 1e-6 + (c.y_bf16 ? std::fabs(want) / 256 : 0.0);
      ASSERT_NEAR(got, want, tol) << "row " << i / n << ", output " << i % n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Scales, Fp8GemmGpu,
    ::testing::Values(ProductCase{false, false, true}, ProductCase{false, false, false},
                      ProductCase{false, true, true}, ProductCase{true, true, true},
                      ProductCase{true, true, false}, ProductCase{true, false, true}),
    [](const ::testing::TestParamInfo<ProductCase>& p) {
      return std::string(p.param.w_per_channel ? "w_channel" : "w_tensor") +
             (p.param.x_dynamic ? "_x_token" : "_x_static") + (p.param.y_bf16 ? "_bf16" : "_f32");
    });

TEST_F(Fp8Gpu, UnalignedShapeIsRefused) {
  if (!has_fp8()) GTEST_SKIP() << "the FP8 GEMM needs sm_89+";
  std::unique_ptr<Fp8Gemm> gemm;
  QS_ASSERT_CUDA(Fp8Gemm::create(0, &gemm));
  Fp8GemmArgs a;
  a.m = 4;
  a.n = 24;
  a.k = 40;  // not a multiple of 16
  const CudaStatus s = gemm->linear(a, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message.find("multiples of 16"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace qs::kernels::cuda
