// golden: AutoencoderKLWan against diffusers on the Wan fixtures' tiny VAEs (made by
// scripts/golden/gen_wan_fixtures.py): Wan2.1's (t2v_a14b, i2v_a14b: z_dim 16, 8x spatial) and
// Wan2.2's residual one (ti2v_5b: z_dim 48, patch 2, 16x spatial). vae.decode of fixed random
// latents, vae.encode(x).latent_dist.mode() of a fixed random 9-frame video, and the t2v runs'
// final latents through wan_denormalize and decode against the frames the pipeline returned;
// then the errors, the config fields refused by name and the memory estimate's shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "../common/reference_tensors.h"
#include "diffusion/autoencoder_kl_wan.h"
#include "models/component.h"

namespace qs {
namespace {

namespace fs = std::filesystem;

const fs::path kWanFixtures = fs::path(QS_SOURCE_DIR) / "tests/golden/fixtures/wan";

std::string vae_dir(const std::string& name) {
  return (kWanFixtures / name / "pipeline/vae").string();
}

// The largest |got - want|; fails on a size mismatch or a non-finite value.
float max_abs_error(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const float err = std::fabs(got[i] - want[i]);
    if (!(err <= worst)) worst = err;  // NaN sticks
  }
  std::printf("%s: max |err| %.3g over %zu values\n", what.c_str(), worst, got.size());
  return worst;
}

struct Expect {
  const char* name;
  const char* run;               // a run whose final latents the pipeline decodes as they are
  int64_t z_dim, scale, latent;  // latent: the fixtures' 32x32 frames / scale
  float decode_tol, encode_tol, frames_tol;
};

// f32 on both sides, sums in another order. Measured (AVX-512, 2 threads): decode max |err|
// 3.7e-7 (Wan2.1) and 6.0e-7 (Wan2.2), encode 2.2e-7 (both), pipeline frames 2.4e-7, 1.8e-7
// and 6.6e-7; the tolerances are about ten times that.
const Expect kCases[] = {
    {"t2v_a14b", "t2v", 16, 8, 4, 5e-6f, 3e-6f, 3e-6f},
    {"i2v_a14b", "i2v", 16, 8, 4, 5e-6f, 3e-6f, 3e-6f},
    {"ti2v_5b", "t2v", 48, 16, 2, 6e-6f, 2e-6f, 6e-6f},
};

void check_case(const Expect& e, ThreadPool& pool) {
  SCOPED_TRACE(e.name);
  testing::ReferenceTensors ref(kWanFixtures / e.name / "reference.safetensors");
  auto vae = diffusion::AutoencoderKLWan::load(vae_dir(e.name));
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  EXPECT_EQ(vae->config().z_dim, e.z_dim);
  EXPECT_EQ(vae->spatial_scale(), e.scale);
  EXPECT_EQ(vae->temporal_scale(), 4);

  // vae.decode(z): [1, z, 3, h, w] -> [1, 3, 9, 32, 32].
  auto video = vae->decode(ref.f32("vae_decode_in").data(), e.z_dim, 3, e.latent, e.latent, pool);
  ASSERT_TRUE(video.ok()) << video.status().to_string();
  EXPECT_LE(max_abs_error(*video, ref.f32("vae_decode_out"), std::string(e.name) + " decode"),
            e.decode_tol);

  // vae.encode(x).latent_dist.mode(): [1, 3, 9, 32, 32] -> [1, z, 3, h, w].
  auto mean = vae->encode_mean(ref.f32("vae_encode_in").data(), 9, 32, 32, pool);
  ASSERT_TRUE(mean.ok()) << mean.status().to_string();
  EXPECT_LE(max_abs_error(*mean, ref.f32("vae_encode_mean"), std::string(e.name) + " encode"),
            e.encode_tol);

  // A run's final latents de-normalised and decoded as the pipeline does (A14B's image to
  // video too: its image enters through the transformer's input, not the latents),
  // then postprocess_video's (v / 2 + 0.5).clamp(0, 1), against its frames [F, H, W, 3].
  const std::string run = e.run;
  const auto& frames_ref = ref.at(run + "_frames");
  const int64_t F = frames_ref.shape[0], H = frames_ref.shape[1], W = frames_ref.shape[2];
  const int64_t lh = H / e.scale, lw = W / e.scale;
  std::vector<float> z = ref.f32(run + "_step3");
  diffusion::wan_denormalize(vae->config(), z.data(), 3, lh, lw);
  auto out = vae->decode(z.data(), e.z_dim, 3, lh, lw, pool);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(static_cast<int64_t>(out->size()), 3 * F * H * W);
  std::vector<float> frames(out->size());
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t f = 0; f < F; ++f) {
      for (int64_t p = 0; p < H * W; ++p) {
        const float v = (*out)[(c * F + f) * H * W + p];
        frames[(f * H * W + p) * 3 + c] = std::clamp(v / 2 + 0.5f, 0.0f, 1.0f);
      }
    }
  }
  EXPECT_LE(
      max_abs_error(frames, ref.f32(run + "_frames"), std::string(e.name) + " " + run + " frames"),
      e.frames_tol);
}

TEST(WanVae, Wan21DecodeAndEncodeMatchDiffusers) {
  ThreadPool pool(2);
  check_case(kCases[0], pool);
  check_case(kCases[1], pool);
}

TEST(WanVae, Wan22ResidualDecodeAndEncodeMatchDiffusers) {
  ThreadPool pool(2);
  check_case(kCases[2], pool);
}

// Wider VAEs (vae_wide: 4-16 channels a level, norm gains and biases off 1 and 0, time
// downsampling in other levels, a 2x3 latent grid): the channel order of Wan2.2's AvgDown3D /
// DupUp3D shortcuts shows here, where the pipelines' 3-channel VAEs cannot tell it apart.
// Measured (AVX-512, 2 threads): decode 1.5e-6 (Wan2.2) and 2.2e-6 (Wan2.1) on values to 1,
// encode 1.8e-7 and 1.5e-7; the bound is about ten times the larger.
TEST(WanVae, WiderVaesMatchDiffusers) {
  ThreadPool pool(2);
  testing::ReferenceTensors ref(kWanFixtures / "vae_wide/reference.safetensors");
  for (const auto& [name, scale, tol] : std::vector<std::tuple<std::string, int64_t, float>>{
           {"wan22", 16, 2e-5f}, {"wan21", 8, 2e-5f}}) {
    SCOPED_TRACE(name);
    auto vae =
        diffusion::AutoencoderKLWan::load((kWanFixtures / "vae_wide" / name / "vae").string());
    ASSERT_TRUE(vae.ok()) << vae.status().to_string();
    ASSERT_EQ(vae->spatial_scale(), scale);
    auto video = vae->decode(ref.f32(name + "_decode_in").data(), 8, 4, 2, 3, pool);
    ASSERT_TRUE(video.ok()) << video.status().to_string();
    EXPECT_LE(max_abs_error(*video, ref.f32(name + "_decode_out"), name + " decode"), tol);
    auto mean =
        vae->encode_mean(ref.f32(name + "_encode_in").data(), 13, 2 * scale, 3 * scale, pool);
    ASSERT_TRUE(mean.ok()) << mean.status().to_string();
    EXPECT_LE(max_abs_error(*mean, ref.f32(name + "_encode_mean"), name + " encode"), tol);
  }
}

TEST(WanVae, OneThreadGivesTheSameVideo) {
  // conv3d cuts its bands by the thread count; each output still sums its products in one
  // GEMM call over the whole unfolded depth, so the results agree (measured: bit for bit).
  testing::ReferenceTensors ref(kWanFixtures / "ti2v_5b/reference.safetensors");
  auto vae = diffusion::AutoencoderKLWan::load(vae_dir("ti2v_5b"));
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  ThreadPool one(1), three(3);
  auto a = vae->decode(ref.f32("vae_decode_in").data(), 48, 3, 2, 2, one);
  auto b = vae->decode(ref.f32("vae_decode_in").data(), 48, 3, 2, 2, three);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(max_abs_error(*a, *b, "1 vs 3 threads"), 1e-6f);
}

TEST(WanVae, NormalizeInvertsDenormalize) {
  auto vae = diffusion::AutoencoderKLWan::load(vae_dir("t2v_a14b"));
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  const auto& cfg = vae->config();
  std::vector<float> z(16 * 2 * 3 * 3);
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> d = z;
  diffusion::wan_denormalize(cfg, d.data(), 2, 3, 3);
  // Channel 5, element 4: z / (1 / std) + mean, as pipeline_wan.py computes it in f32.
  const float inv = 1.0f / static_cast<float>(cfg.latents_std[5]);
  EXPECT_EQ(d[5 * 18 + 4], z[5 * 18 + 4] / inv + static_cast<float>(cfg.latents_mean[5]));
  diffusion::wan_normalize(cfg, d.data(), 2, 3, 3);
  for (size_t i = 0; i < z.size(); ++i) ASSERT_NEAR(d[i], z[i], 2e-6f) << i;
}

TEST(WanVae, RefusesBadSizes) {
  auto vae = diffusion::AutoencoderKLWan::load(vae_dir("ti2v_5b"));
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  ThreadPool pool(2);
  std::vector<float> buf(3 * 9 * 48 * 48, 0.1f);
  auto message = [](const Status& s) { return s.ok() ? std::string("ok") : s.message(); };
  auto d = vae->decode(buf.data(), 16, 3, 2, 2, pool);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(message(d.status()).find("16 channels"), std::string::npos) << message(d.status());
  EXPECT_NE(message(d.status()).find("z_dim is 48"), std::string::npos);
  d = vae->decode(buf.data(), 48, 0, 2, 2, pool);
  EXPECT_FALSE(d.ok());
  d = vae->decode(buf.data(), 48, 1, 2, -1, pool);
  EXPECT_FALSE(d.ok());
  auto e = vae->encode_mean(buf.data(), 8, 32, 32, pool);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(message(e.status()).find("8 frames"), std::string::npos) << message(e.status());
  e = vae->encode_mean(buf.data(), 9, 40, 32, pool);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(message(e.status()).find("40x32"), std::string::npos) << message(e.status());
  EXPECT_NE(message(e.status()).find("multiples of 16"), std::string::npos);
  e = vae->encode_mean(buf.data(), 0, 32, 32, pool);
  EXPECT_FALSE(e.ok());
  // 48x48 is a multiple of 16: one frame encodes to one latent frame.
  e = vae->encode_mean(buf.data(), 1, 48, 48, pool);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->size(), 48u * 1 * 3 * 3);
}

// config.json of the Wan2.1 fixture with `edit` applied, read by read_wan_vae_config.
Status read_edited_config(const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("wan_vae_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(vae_dir("t2v_a14b") + "/config.json"));
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump();
  auto c = models::Component::open_config(dir.string());
  fs::remove_all(dir);
  if (!c.ok()) return c.status();
  auto v = diffusion::read_wan_vae_config(*c);
  return v.ok() ? ok_status() : v.status();
}

TEST(WanVae, RefusesConfigsItDoesNotImplement) {
  EXPECT_TRUE(read_edited_config([](nlohmann::json&) {}).ok());
  Status s = read_edited_config([](nlohmann::json& j) { j["attn_scales"] = {0.5}; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("attn_scales"), std::string::npos) << s.message();
  s = read_edited_config([](nlohmann::json& j) {
    j["temperal_downsample"] = {false, false, true};
  });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("temporal compression 2"), std::string::npos) << s.message();
  s = read_edited_config([](nlohmann::json& j) { j["temperal_downsample"] = {false, true}; });
  EXPECT_NE(s.message().find("temperal_downsample"), std::string::npos) << s.message();
  s = read_edited_config([](nlohmann::json& j) { j["scale_factor_spatial"] = 16; });
  EXPECT_NE(s.message().find("scale_factor_spatial 16"), std::string::npos) << s.message();
  s = read_edited_config([](nlohmann::json& j) { j["latents_std"] = {1.0, 2.0}; });
  EXPECT_NE(s.message().find("latents_std"), std::string::npos) << s.message();
  s = read_edited_config([](nlohmann::json& j) { j["out_channels"] = 12; });
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("out_channels 12"), std::string::npos) << s.message();
}

TEST(WanVae, DecodePeakGrowsWithFramesThroughTheOutputOnly) {
  for (const char* name : {"t2v_a14b", "ti2v_5b"}) {
    auto c = models::Component::open_config(vae_dir(name));
    ASSERT_TRUE(c.ok());
    auto cfg = diffusion::read_wan_vae_config(*c);
    ASSERT_TRUE(cfg.ok());
    const int64_t s = cfg->scale_factor_spatial, h = 480 / s, w = 832 / s;
    size_t prev = 0;
    for (int64_t t = 1; t <= 21; ++t) {
      const size_t peak = diffusion::wan_vae_decode_peak_bytes(*cfg, t, h, w, 4);
      const size_t output = static_cast<size_t>(3 * (1 + 4 * (t - 1)) * 480 * 832) * 4;
      EXPECT_GT(peak, output) << name << " t " << t;
      if (t > 1) {
        EXPECT_EQ(peak - prev, size_t{3} * 4 * 480 * 832 * 4) << name << " t " << t;
      }
      prev = peak;
    }
  }
}

}  // namespace
}  // namespace qs
