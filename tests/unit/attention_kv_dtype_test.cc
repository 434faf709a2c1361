// tests: the paged attention on bf16 and fp8 (e4m3, e5m2) caches with vLLM's k/v scales. The
// in-register decoders of ops/kv_codec.h against core/dtype.h's scalar ones on every code;
// paged_kv_write's conversion (x / scale, saturating); the fast kernel against the scalar
// reference on the same quantized cache (prefill, decode, GQA, sliding window, key splits);
// and the quantized result against the f32 cache within the format's precision.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_fp8_cpu.h"
#include "ops/attention.h"
#include "ops/kv_codec.h"

namespace qs::ops {
namespace {

constexpr int64_t kBlock = 16, kKvHeads = 2, kHeads = 6, kHeadDim = 40, kBlocks = 40;

template <class Codec>
void expect_decoder_matches_scalar(float (*scalar)(uint8_t)) {
  for (int code = 0; code < 256; ++code) {
    const float want = scalar(static_cast<uint8_t>(code));
    const float got = Codec::load(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      EXPECT_EQ(got, want) << "code " << code;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "code " << code;
    }
  }
}

TEST(KvCodec, Fp8DecodersMatchTheScalarOnesOnEveryCode) {
  expect_decoder_matches_scalar<KvFp8E4M3>(fp8_e4m3_to_f32);
  expect_decoder_matches_scalar<KvFp8E5M2>(fp8_e5m2_to_f32);
}

TEST(KvCodec, StoresSaturateAndRoundTrip) {
  EXPECT_EQ(KvFp8E4M3::load(KvFp8E4M3::store(1e6f)), 448.0f);
  EXPECT_EQ(KvFp8E4M3::load(KvFp8E4M3::store(-INFINITY)), -448.0f);
  EXPECT_EQ(KvFp8E5M2::load(KvFp8E5M2::store(1e9f)), 57344.0f);
  EXPECT_EQ(KvFp8E5M2::load(KvFp8E5M2::store(-INFINITY)), -57344.0f);
  EXPECT_TRUE(std::isnan(KvFp8E4M3::load(KvFp8E4M3::store(NAN))));
  EXPECT_TRUE(std::isnan(KvFp8E5M2::load(KvFp8E5M2::store(NAN))));
  // Every finite code survives store(load(code)).
  for (int code = 0; code < 256; ++code) {
    const uint8_t c = static_cast<uint8_t>(code);
    if ((c & 0x7f) != 0x7f) {
      EXPECT_EQ(KvFp8E4M3::store(KvFp8E4M3::load(c)), c) << code;
    }
    if ((c & 0x7f) < 0x7c) {
      EXPECT_EQ(KvFp8E5M2::store(KvFp8E5M2::load(c)), c) << code;
    }
  }
  EXPECT_EQ(KvBF16::load(KvBF16::store(1.5f)), 1.5f);
}

// The AVX-512 row loops against the scalar decoders: every finite code, lengths with and
// without a tail, values that reach e5m2's range.
TEST(KvCodec, Avx512RowLoopsMatchTheScalarDecoders) {
  if (!kernels::isa_supported(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  struct Format {
    float (*scalar)(uint8_t);
    float (*dot)(const float*, const uint8_t*, int64_t);
    void (*axpy)(float, const uint8_t*, float*, int64_t);
    uint8_t first_non_finite;  // magnitude codes from here on are skipped
  };
  const Format formats[] = {
      {fp8_e4m3_to_f32, kernels::cpu::kv_dot_e4m3_avx512, kernels::cpu::kv_axpy_e4m3_avx512, 0x7f},
      {fp8_e5m2_to_f32, kernels::cpu::kv_dot_e5m2_avx512, kernels::cpu::kv_axpy_e5m2_avx512, 0x7c}};
  std::mt19937 rng(2);
  std::normal_distribution<float> noise;
  for (const Format& f : formats) {
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7f) < f.first_non_finite) codes.push_back(static_cast<uint8_t>(c));
    }
    std::shuffle(codes.begin(), codes.end(), rng);
    for (int64_t n :
         std::vector<int64_t>{1, 7, 16, 17, 40, 64, 100, static_cast<int64_t>(codes.size())}) {
      std::vector<float> q(n), y(n), want_y(n);
      for (auto& x : q) x = noise(rng);
      for (auto& x : y) x = noise(rng);
      double want = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float k = f.scalar(codes[i]);
        want += static_cast<double>(q[i]) * k;
        scale += std::fabs(static_cast<double>(q[i]) * k);
        want_y[i] = y[i] + 0.75f * k;
      }
      EXPECT_NEAR(f.dot(q.data(), codes.data(), n), want, 1e-6 * scale + 1e-30) << n;
      f.axpy(0.75f, codes.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(y[i], want_y[i], 1e-6f * std::fabs(want_y[i])) << n << " " << i;
      }
    }
  }
  // e4m3's NaN code reads as NaN here too.
  const uint8_t nan_code[16] = {0x7f};
  const float ones[16] = {1};
  EXPECT_TRUE(std::isnan(kernels::cpu::kv_dot_e4m3_avx512(ones, nan_code, 16)));
}

// A cache of `dtype` filled through paged_kv_write from the same random K/V for each dtype.
struct Cache {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // per sequence: cached, new
  std::vector<uint8_t> k_bytes, v_bytes;
  PagedKvLayer layer;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> write_seqs, seqs;
  std::vector<float> q;
  int64_t n_tokens = 0;

  int64_t hd = kHeadDim;  // 40: the per-key row loops; multiples of 16: the sixteen-key kernels

  Cache(DType dtype, float k_scale, float v_scale, std::vector<std::pair<int64_t, int64_t>> s,
        float magnitude = 1.0f, int64_t head_dim = kHeadDim)
      : shapes(std::move(s)), hd(head_dim) {
    const int64_t row = kKvHeads * hd;
    k_bytes.assign(kBlocks * kBlock * row * dtype_size(dtype), 0);
    v_bytes = k_bytes;
    layer = {dtype, k_bytes.data(), v_bytes.data(), kBlocks, kBlock, kKvHeads, hd};
    layer.k_scale = k_scale;
    layer.v_scale = v_scale;
    std::mt19937 rng(11);
    std::normal_distribution<float> noise;
    std::vector<int32_t> ids(kBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next_block = 0;
    // Whole sequences written once (cached part and new part together), then attended with
    // only the new rows as queries.
    std::vector<float> k, v;
    int64_t written = 0;
    for (auto [start, n] : shapes) {
      const int64_t len = start + n;
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (len + kBlock - 1) / kBlock; ++b) table.push_back(ids[next_block++]);
      tables.push_back(table);
      for (int64_t i = 0; i < len * row; ++i) {
        k.push_back(magnitude * noise(rng));
        v.push_back(magnitude * noise(rng));
      }
      written += len;
    }
    int64_t at = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t len = shapes[i].first + shapes[i].second;
      write_seqs.push_back({at, len, 0, tables[i]});
      at += len;
    }
    paged_kv_write(layer, write_seqs, k.data(), v.data());
    for (size_t i = 0; i < shapes.size(); ++i) {
      seqs.push_back({n_tokens, shapes[i].second, shapes[i].first, tables[i]});
      n_tokens += shapes[i].second;
    }
    q.resize(n_tokens * kHeads * hd);
    for (auto& x : q) x = noise(rng);
    EXPECT_EQ(written, at);
  }
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

const std::vector<std::pair<int64_t, int64_t>> kMixed = {{0, 21}, {40, 1}, {9, 7}, {0, 1}};
const std::vector<std::pair<int64_t, int64_t>> kLong = {{300, 1}, {150, 2}};

TEST(PagedAttentionKvDtype, FastMatchesReferenceOnEveryCacheDtype) {
  for (int64_t hd : {kHeadDim, int64_t{64}, int64_t{48}}) {
    for (DType t : {DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
      for (const auto& shapes : {kMixed, kLong}) {
        SCOPED_TRACE("head_dim " + std::to_string(hd) + " " + dtype_name(t));
        // K and V of magnitude ~30 with scales that bring them into the fp8 range.
        Cache c(t, 0.125f, 0.0625f, shapes, 30.0f, hd);
        for (int threads : {1, 3, 16}) {
          ThreadPool pool(threads);
          for (int64_t window : {0, 5, 150}) {
            AttentionParams p{kHeads, 1.0f / std::sqrt(static_cast<float>(hd)) / 30.0f, window};
            std::vector<float> ref(c.q.size()), fast(c.q.size());
            ASSERT_TRUE(paged_attention_ref(c.q.data(), c.layer, c.seqs, p, ref.data()).ok());
            ASSERT_TRUE(paged_attention(c.q.data(), c.layer, c.seqs, p, fast.data(), pool).ok());
            // Outputs are ~30 in magnitude; f32 summation order differs between the two.
            expect_close(fast, ref, 2e-4f);
          }
        }
      }
    }
  }
}

TEST(PagedAttentionKvDtype, QuantizedCacheStaysCloseToTheF32One) {
  ThreadPool pool(2);
  AttentionParams p{kHeads, 1.0f / std::sqrt(static_cast<float>(kHeadDim)), 0};
  Cache f32(DType::kF32, 1.0f, 1.0f, kLong);
  std::vector<float> want(f32.q.size());
  ASSERT_TRUE(paged_attention(f32.q.data(), f32.layer, f32.seqs, p, want.data(), pool).ok());
  // Unit-variance K/V: bf16 keeps 8 bits of mantissa, e4m3 4, e5m2 3. Worst-case element
  // errors of the averaged output, with margin.
  const std::pair<DType, float> cases[] = {
      {DType::kBF16, 0.01f}, {DType::kF8E4M3, 0.08f}, {DType::kF8E5M2, 0.15f}};
  for (auto [t, tol] : cases) {
    Cache c(t, 1.0f, 1.0f, kLong);
    std::vector<float> got(c.q.size());
    ASSERT_TRUE(paged_attention(c.q.data(), c.layer, c.seqs, p, got.data(), pool).ok());
    expect_close(got, want, tol);
  }
}

TEST(PagedAttentionKvDtype, WriteDividesByTheScaleAndSaturates) {
  const int64_t row = kKvHeads * kHeadDim;
  std::vector<uint8_t> kc(kBlock * row), vc(kBlock * row);
  PagedKvLayer layer{DType::kF8E4M3, kc.data(), vc.data(), 1, kBlock, kKvHeads, kHeadDim};
  layer.k_scale = 0.5f;
  layer.v_scale = 4.0f;
  std::vector<int32_t> table = {0};
  std::vector<AttentionSeq> seqs = {{0, 1, 3, table}};
  std::vector<float> k(row, 1.25f), v(row, 10.0f);
  k[0] = 1e4f;    // / 0.5 saturates at 448
  v[1] = -3e3f;   // / 4 = -750: saturates at -448
  v[2] = 0.001f;  // / 4 underflows to the smallest subnormal or zero
  paged_kv_write(layer, seqs, k.data(), v.data());
  const uint8_t* kr = kc.data() + 3 * row;
  const uint8_t* vr = vc.data() + 3 * row;
  EXPECT_EQ(fp8_e4m3_to_f32(kr[0]), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(kr[1]), 2.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(vr[0]), 2.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(vr[1]), -448.0f);
  EXPECT_EQ(vr[2], f32_to_fp8_e4m3(0.001f / 4.0f));
  // Other slots untouched.
  EXPECT_EQ(kc[0], 0);
}

}  // namespace
}  // namespace qs::ops
