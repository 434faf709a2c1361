// The W4A16 tensor-core GEMM (kernels/cuda/w4a16_gemm.h) on a GPU against the host product of
// bf16 x and formats::dequantize's weights (which the layout test holds equal to the packed
// weights bit for bit): GPTQ / AWQ / AutoRound-like weights at 2, 3 and 4 bits, group 32, 64, 128
// and per channel, symmetric and asymmetric, act-order, shapes that pad n and k, at m = 1, 7,
// 16, 64, 512, with and without split-K, f32 and bf16 outputs. Skipped without a GPU.
//
// Tolerance: the weights are exact (small integers times f32 scales), x is bf16 on both sides,
// so only the order of the f32 sums differs: |y - ref| <= 1e-4 * sum_c |x_c w_c| (an f32
// accumulation over k <= 4096 terms stays well inside it; a misplaced fragment is off by
// about |ref|, ~1e-2 of that sum), plus half a bf16 step of |ref| for bf16 outputs.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "cuda_device_buffer.h"
#include "formats/quantized_weight.h"
#include "formats/rtn.h"
#include "kernels/cuda/w4a16_gemm.h"
#include "kernels/cuda/w4a16_layout.h"
#include "w4a16_glue.h"

namespace qs::kernels::cuda {
namespace {

struct GemmCase {
  const char* name;
  int bits;
  int64_t group;  // -1 per channel
  bool sym;
  bool act_order;
  int64_t n, k;
  DType scale_dtype;
  std::vector<int64_t> ms;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<int64_t> kAllM = {1, 7, 16, 64, 512};

std::vector<GemmCase> cases() {
  return {
      {"gptq_w4_g128_sym", 4, 128, true, false, 512, 2048, DType::kF16, kAllM},
      {"awq_w4_g128_asym", 4, 128, false, false, 384, 1024, DType::kF16, kAllM},
      {"gptq_w4_g128_asym_act_order", 4, 128, false, true, 256, 1024, DType::kF16, kAllM},
      {"autoround_w4_g32_sym_bf16", 4, 32, true, false, 192, 640, DType::kBF16, kAllM},
      {"ct_w3_g32_asym_pad_n_k", 3, 32, false, false, 37, 101, DType::kBF16, kAllM},
      {"w2_per_channel_sym_f32", 2, -1, true, false, 200, 320, DType::kF32, kAllM},
      {"w4_g64_asym_act_order_pad_k", 4, 64, false, true, 96, 200, DType::kF16, kAllM},
      // Decode on a real layer's shape: split-K with many stages per split.
      {"w4_g128_sym_4096", 4, 128, true, false, 4096, 4096, DType::kF16, {1, 7, 16}},
  };
}

float round_to(DType t, float v) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

formats::QuantizedWeight make_weight(const GemmCase& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.n * 31 + c.k));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> src(static_cast<size_t>(c.n * c.k));
  for (float& v : src) v = normal(rng);
  formats::QuantizedWeight w = formats::rtn_quantize(src.data(), c.n, c.k, c.bits, c.group, c.sym);
  w.scale_dtype = c.scale_dtype;
  for (float& s : w.scales) s = round_to(c.scale_dtype, s);
  if (c.act_order) {
    std::vector<int32_t> g_idx(static_cast<size_t>(c.k));
    for (int64_t col = 0; col < c.k; ++col) g_idx[col] = static_cast<int32_t>(col / w.group_size);
    std::shuffle(g_idx.begin(), g_idx.end(), rng);
    w.g_idx = g_idx;
  }
  return w;
}

class W4A16GemmGpu : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override { QS_SKIP_WITHOUT_GPU(); }
};

TEST_P(W4A16GemmGpu, MatchesHostProduct) {
  const GemmCase& c = GetParam();
  DeviceInfo info;
  QS_ASSERT_CUDA(device_info(0, &info));
  const formats::QuantizedWeight w = make_weight(c);
  std::vector<float> wd(static_cast<size_t>(c.n * c.k));
  formats::dequantize(w, wd.data());

  const W4A16Glue glue = w4a16_glue(w, scale_type_of(c.scale_dtype));
  const W4A16Layout layout = w4a16_layout(glue.src);
  AlignedBuffer host(layout.total_bytes);
  w4a16_pack(glue.src, host.data.get());
  DeviceBuffer packed;
  QS_ASSERT_CUDA(packed.alloc(layout.total_bytes));
  QS_ASSERT_CUDA(copy(packed.as<void>(), host.data.get(), layout.total_bytes,
                      CopyKind::kHostToDevice, nullptr));
  const W4A16View view = w4a16_view(layout, packed.as<void>());

  std::mt19937 rng(static_cast<uint32_t>(c.k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t m : c.ms) {
    std::vector<uint16_t> xb(static_cast<size_t>(m * c.k));
    for (uint16_t& v : xb) v = f32_to_bf16(normal(rng));
    std::vector<double> ref(static_cast<size_t>(m * c.n)), mag(ref.size());
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0.0, a = 0.0;
        for (int64_t col = 0; col < c.k; ++col) {
          const double p =
              static_cast<double>(bf16_to_f32(xb[static_cast<size_t>(r * c.k + col)])) *
              wd[static_cast<size_t>(j * c.k + col)];
          s += p;
          a += std::fabs(p);
        }
        ref[static_cast<size_t>(r * c.n + j)] = s;
        mag[static_cast<size_t>(r * c.n + j)] = a;
      }
    }
    DeviceBuffer x;
    QS_ASSERT_CUDA(x.upload(xb));

    const int chosen = w4a16_choose_splits(view, m, info.n_sms);
    std::vector<int> split_list = {chosen, 1};
    if (m <= 16) split_list.push_back(3);
    for (int splits : split_list) {
      for (bool y_bf16 : {false, true}) {
        if (y_bf16 && splits != chosen) continue;
        SCOPED_TRACE("m=" + std::to_string(m) + " splits=" + std::to_string(splits) +
                     (y_bf16 ? " bf16 out" : " f32 out"));
        // y with a guard band after it that the kernel must leave alone.
        const size_t y_bytes = static_cast<size_t>(m * c.n) * (y_bf16 ? 2 : 4);
        const size_t guard = 256;
        std::vector<uint8_t> init(y_bytes + guard, 0xA5);
        DeviceBuffer y;
        QS_ASSERT_CUDA(y.upload(init));
        DeviceBuffer ws;
        const size_t ws_bytes = w4a16_workspace_bytes(view, m, splits);
        QS_ASSERT_CUDA(ws.alloc(ws_bytes));

        W4A16GemmArgs args;
        args.w = view;
        args.x = x.as<uint16_t>();
        args.m = m;
        args.y = y.as<void>();
        args.y_bf16 = y_bf16;
        args.splits = splits;
        args.workspace = ws.as<void>();
        args.workspace_bytes = ws_bytes;
        QS_ASSERT_CUDA(w4a16_gemm(args, nullptr));
        QS_ASSERT_CUDA(device_synchronize());

        std::vector<uint8_t> out;
        QS_ASSERT_CUDA(y.download(&out));
        for (size_t i = y_bytes; i < out.size(); ++i) {
          ASSERT_EQ(out[i], 0xA5) << "byte " << i - y_bytes << " past y was written";
        }
        for (int64_t i = 0; i < m * c.n; ++i) {
          float got;
          if (y_bf16) {
            uint16_t b;
            std::memcpy(&b, out.data() + i * 2, 2);
            got = bf16_to_f32(b);
          } else {
            std::memcpy(&got, out.data() + i * 4, 4);
          }
          const double want = ref[static_cast<size_t>(i)];
          const double tol =
              1e-4 * mag[static_cast<size_t>(i)] + 1e-6 + (y_bf16 ? std::fabs(want) / 256 : 0.0);
          ASSERT_NEAR(got, want, tol) << "row " << i / c.n << ", output " << i % c.n;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, W4A16GemmGpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& p) { return p.param.name; });

}  // namespace
}  // namespace qs::kernels::cuda
