// golden: AutoencoderKL against diffusers on the tiny pipeline's two-level VAE (GroupNorm with
// 4 groups, mid-block attention, one upsample / downsample): decode of fixed random latents
// and encode (latent_dist.mean) of a fixed random image.
#include <gtest/gtest.h>

#include "diffusion/autoencoder_kl.h"
#include "flux_reference.h"

namespace qs {
namespace {

using testing::expect_close;

TEST(FluxVae, DecodeAndEncodeMatchDiffusers) {
  testing::FluxReference ref;
  auto vae = diffusion::AutoencoderKL::load(testing::kFluxPipeline + "/vae");
  ASSERT_TRUE(vae.ok()) << vae.status().to_string();
  EXPECT_EQ(vae->config().scale(), 2);
  ThreadPool pool(2);
  std::vector<float> image, mean;
  ASSERT_TRUE(vae->decode(ref.f32("vae_decode_in").data(), 1, 16, 16, &image, pool).ok());
  // f32 on both sides; GroupNorm statistics and convolution sums in another order.
  expect_close(image, ref.f32("vae_decode_out"), 1e-5f, 1e-4f, "vae decode");
  ASSERT_TRUE(vae->encode_mean(ref.f32("vae_encode_in").data(), 1, 32, 32, &mean, pool).ok());
  expect_close(mean, ref.f32("vae_encode_mean"), 1e-5f, 1e-4f, "vae encode mean");
  EXPECT_FALSE(vae->encode_mean(image.data(), 1, 31, 32, &mean, pool).ok());
}

}  // namespace
}  // namespace qs
