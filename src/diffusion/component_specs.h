// diffusion: the tensors of a pipeline component from its config.json alone, for sizing a
// component whose weights are not there (inspect, pipeline_memory.h): transformers' T5 / UMT5
// encoder (t5_encoder.h) and diffusers' AutoencoderKLWan (autoencoder_kl_wan.h). Each list is
// the one its loader reads, name for name and shape for shape (wan_inspect_cli_test checks them
// against the golden pipelines' checkpoints); the transformers' own are flux_tensor_specs and
// wan_transformer_tensor_specs.
#pragma once

#include <vector>

#include "core/status.h"
#include "diffusion/autoencoder_kl_wan.h"
#include "diffusion/t5_encoder.h"
#include "models/component.h"
#include "models/model_config.h"

namespace qs::diffusion {

// Every tensor T5Encoder::load reads: the embedding as "shared.weight" (transformers saves the
// tied table under that name), the relative-position bias of block 0 (T5) or of every block
// (UMT5), norms, and the attention and feed-forward matmuls (`linear`).
std::vector<models::TensorSpec> t5_encoder_tensor_specs(const T5Config& config);

// Every tensor AutoencoderKLWan::load reads: post_quant_conv and the decoder, and with
// `encoder` the encoder and quant_conv (a checkpoint may leave them out; diffusers saves them).
// Wan2.1's encoder lists its blocks flat (down_blocks.k), Wan2.2's residual one per level.
std::vector<models::TensorSpec> wan_vae_tensor_specs(const WanVaeConfig& config, bool encoder);

}  // namespace qs::diffusion
