// diffusion: TAESD-family tiny autoencoders (Ollin Boer Bohan's taesd.py), here TAEF2 for
// FLUX.2's 32-channel latents: plain 3x3 convolution / ReLU residual blocks, three 2x
// resamplings, and in the deepest blocks the "midblock GroupNorm" branch TAEF2 adds
// (x + conv1x1(relu(GroupNorm(4)(conv1x1(x))))). Images in [0, 1]; weights from the
// published .pth state_dicts (io/pth_reader.h), f16 converted to f32 at load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace qs::diffusion {

class TinyAutoencoder {
 public:
  // encoder_pth may be empty (decoder only).
  static Result<TinyAutoencoder> load(const std::string& encoder_pth,
                                      const std::string& decoder_pth);

  int64_t latent_channels() const { return latent_channels_; }
  static constexpr int64_t kScale = 8;

  // image [n, 3, h, w] in [0, 1], h and w multiples of 8 -> latents [n, L, h/8, w/8].
  Status encode(const float* image, int64_t n, int64_t h, int64_t w, std::vector<float>* latents,
                ThreadPool& pool) const;
  // latents [n, L, h, w] -> image [n, 3, 8h, 8w] (not clamped; taesd.py clamps to [0, 1]).
  Status decode(const float* latents, int64_t n, int64_t h, int64_t w, std::vector<float>* image,
                ThreadPool& pool) const;

  struct Conv {
    std::vector<float> w, b;  // [c_out, c_in, k, k], [c_out] or empty
    int64_t c_in = 0, c_out = 0, k = 0, stride = 1;
  };
  struct Block {
    Conv c0, c1, c2;  // 3x3, ReLU between
    bool has_pool = false;
    Conv pool_in, pool_out;         // 1x1, no bias: 64 -> 256 -> 64
    std::vector<float> gn_w, gn_b;  // GroupNorm(4, 256)
  };
  // One entry of the nn.Sequential: a convolution, a block, or an upsample (nearest 2x).
  struct Layer {
    enum Kind { kConv, kBlock, kUpsample, kRelu, kClamp } kind;
    Conv conv;
    Block block;
  };

 private:
  std::vector<Layer> encoder_, decoder_;
  int64_t latent_channels_ = 0;
};

}  // namespace qs::diffusion
