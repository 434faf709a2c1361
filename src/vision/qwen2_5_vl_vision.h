// vision: Qwen2.5-VL's vision tower (transformers' Qwen2_5_VisionTransformerPretrainedModel;
// Qwen2.5-Omni's thinker has the same): patches of 3 x 2 frames x 14 x 14 pixels embedded by
// one matmul (the stride-equal conv3d), 2-D rotary positions (the row and column of each patch,
// half the frequencies each), pre-RMSNorm blocks whose attention runs inside windows of
// window_size pixels except in the full-attention blocks (inside each frame of each image),
// gated-SiLU MLPs, and the patch merger: each 2 x 2 group of patches normed, concatenated and
// projected by a GELU MLP to the decoder's width. Its output fills the prompt's image
// placeholders (models::ForwardBatch::embeddings), in the order of the images.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "models/mrope.h"
#include "models/multimodal.h"
#include "ops/linear.h"

namespace qs::vision {

struct Qwen25VisionConfig {
  int64_t depth = 32, hidden_size = 1280, intermediate_size = 3420, num_heads = 16;
  int64_t out_hidden_size = 3584, in_channels = 3;
  int64_t patch_size = 14, temporal_patch_size = 2, spatial_merge_size = 2, window_size = 112;
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  double rope_theta = 10000.0;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_values() const {  // pixel values per patch row
    return in_channels * temporal_patch_size * patch_size * patch_size;
  }
};

// A checkpoint's vision_config, checked (sizes in range, heads dividing the width, a head_dim
// the 2-D rotary can split in four, "silu").
Result<Qwen25VisionConfig> parse_qwen25_vision_config(const nlohmann::json& vision_config);

struct Qwen25VisionBlock {
  std::vector<float> norm1, norm2;
  ops::LinearWeight qkv, proj, gate, up, down;
  std::vector<float> b_qkv, b_proj, b_gate, b_up, b_down;
};

class Qwen25VisionTower : public models::VisionEncoder {
 public:
  // The tower of the checkpoint in `dir` (config.json's vision_config, tensors under
  // "visual."). A quantized checkpoint's tower is usually kept 16-bit by the tools; quantized
  // tower linears load as any other.
  static Result<Qwen25VisionTower> load(const std::string& dir);
  const Qwen25VisionConfig& config() const { return config_; }

  // pixels: [sum of t*h*w over the grids, patch_values()], each image's patches in the image
  // processor's order; out: [sum of tokens, out_hidden_size], each image's merged tokens in
  // prompt order.
  Status forward(const float* pixels, std::span<const models::VisionGrid> grids,
                 std::vector<float>* out, ThreadPool& pool) const;

  // models::VisionEncoder, for the engine.
  int64_t merge_size() const override { return config_.spatial_merge_size; }
  int64_t patch_values() const override { return config_.patch_values(); }
  int64_t out_width() const override { return config_.out_hidden_size; }
  Status encode(const float* pixels, std::span<const models::VisionGrid> grids,
                std::vector<float>* out, ThreadPool& pool) const override {
    return forward(pixels, grids, out, pool);
  }

 private:
  Qwen25VisionConfig config_;
  models::Component weights_;
  ops::LinearWeight patch_embed_;  // [hidden, patch_values()]
  std::vector<Qwen25VisionBlock> blocks_;
  std::vector<float> merger_norm_;
  ops::LinearWeight merger_fc1_, merger_fc2_;
  std::vector<float> merger_b1_, merger_b2_;
};

}  // namespace qs::vision
