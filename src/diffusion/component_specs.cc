// diffusion: component tensor lists from configs (see component_specs.h).
#include "diffusion/component_specs.h"

#include <string>

namespace qs::diffusion {

namespace {
// A namespace of its own: the room compiles in unity batches, whose files share the anonymous
// namespace.
namespace component_tensors {

using models::TensorSpec;

void add_conv(std::vector<TensorSpec>* t, const std::string& p, std::vector<int64_t> shape) {
  const int64_t c_out = shape[0];
  t->push_back({p + ".weight", std::move(shape), false});
  t->push_back({p + ".bias", {c_out}, false});
}

// WanCausalConv3d with a cubic kernel k.
void add_causal(std::vector<TensorSpec>* t, const std::string& p, int64_t c_in, int64_t c_out,
                int64_t k) {
  add_conv(t, p, {c_out, c_in, k, k, k});
}

// WanResidualBlock: norm1, conv1, norm2, conv2, and a 1x1x1 shortcut when the width changes.
void add_res(std::vector<TensorSpec>* t, const std::string& p, int64_t c_in, int64_t c_out) {
  t->push_back({p + ".norm1.gamma", {c_in, 1, 1, 1}, false});
  add_causal(t, p + ".conv1", c_in, c_out, 3);
  t->push_back({p + ".norm2.gamma", {c_out, 1, 1, 1}, false});
  add_causal(t, p + ".conv2", c_out, c_out, 3);
  if (c_in != c_out) add_causal(t, p + ".conv_shortcut", c_in, c_out, 1);
}

// WanMidBlock: a res block, the per-frame attention (nn.Conv2d 1x1 q/k/v and projection), a
// res block.
void add_mid(std::vector<TensorSpec>* t, const std::string& p, int64_t c) {
  add_res(t, p + ".resnets.0", c, c);
  const std::string a = p + ".attentions.0";
  t->push_back({a + ".norm.gamma", {c, 1, 1}, false});
  add_conv(t, a + ".to_qkv", {3 * c, c, 1, 1});
  add_conv(t, a + ".proj", {c, c, 1, 1});
  add_res(t, p + ".resnets.1", c, c);
}

// WanResample(dim, mode, upsample_out_dim = out): the 3x3 nn.Conv2d (upsampling to `out`),
// and a time convolution for the 3-D modes (doubling the channels when upsampling).
void add_resample(std::vector<TensorSpec>* t, const std::string& p, bool up, bool time, int64_t dim,
                  int64_t out) {
  add_conv(t, p + ".resample.1", {up ? out : dim, dim, 3, 3});
  if (time) add_conv(t, p + ".time_conv", {up ? 2 * dim : dim, dim, 3, 1, 1});
}

}  // namespace component_tensors
}  // namespace

using models::TensorSpec;

std::vector<TensorSpec> t5_encoder_tensor_specs(const T5Config& f) {
  const int64_t d = f.d_model, inner = f.num_heads * f.d_kv;
  std::vector<TensorSpec> t;
  t.push_back({"shared.weight", {f.vocab_size, d}, false});
  for (int64_t i = 0; i < f.num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    if (i == 0 || f.model_type == "umt5") {
      t.push_back({p + "0.SelfAttention.relative_attention_bias.weight",
                   {f.relative_attention_num_buckets, f.num_heads},
                   false});
    }
    t.push_back({p + "0.layer_norm.weight", {d}, false});
    for (const char* m : {"q", "k", "v"}) {
      t.push_back({p + "0.SelfAttention." + m + ".weight", {inner, d}, true});
    }
    t.push_back({p + "0.SelfAttention.o.weight", {d, inner}, true});
    t.push_back({p + "1.layer_norm.weight", {d}, false});
    if (f.gated) {
      t.push_back({p + "1.DenseReluDense.wi_0.weight", {f.d_ff, d}, true});
      t.push_back({p + "1.DenseReluDense.wi_1.weight", {f.d_ff, d}, true});
    } else {
      t.push_back({p + "1.DenseReluDense.wi.weight", {f.d_ff, d}, true});
    }
    t.push_back({p + "1.DenseReluDense.wo.weight", {d, f.d_ff}, true});
  }
  t.push_back({"encoder.final_layer_norm.weight", {d}, false});
  return t;
}

std::vector<TensorSpec> wan_vae_tensor_specs(const WanVaeConfig& v, bool encoder) {
  using namespace component_tensors;
  const int64_t levels = static_cast<int64_t>(v.dim_mult.size()), z = v.z_dim;
  const bool res = v.is_residual;
  std::vector<TensorSpec> t;
  add_causal(&t, "post_quant_conv", z, z, 1);

  const std::vector<WanVaeUpLevel> up = wan_vae_decoder_levels(v);
  const int64_t first = up[0].in;
  add_causal(&t, "decoder.conv_in", z, first, 3);
  add_mid(&t, "decoder.mid_block", first);
  for (int64_t i = 0; i < levels; ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    const WanVaeUpLevel& l = up[static_cast<size_t>(i)];
    for (int64_t r = 0; r <= v.num_res_blocks; ++r) {
      add_res(&t, p + ".resnets." + std::to_string(r), r == 0 ? l.in : l.out, l.out);
    }
    if (l.mode == WanResampleMode::kNone) continue;
    add_resample(&t, p + (res ? ".upsampler" : ".upsamplers.0"), true,
                 l.mode == WanResampleMode::kUp3d, l.out, l.resample_out);
  }
  const int64_t last = up.back().out;
  t.push_back({"decoder.norm_out.gamma", {last, 1, 1, 1}, false});
  add_causal(&t, "decoder.conv_out", last, v.out_channels, 3);
  if (!encoder) return t;

  // WanEncoder3d: base * [1] + base * dim_mult.
  std::vector<int64_t> ed = {v.base_dim};
  for (int64_t m : v.dim_mult) ed.push_back(v.base_dim * m);
  add_causal(&t, "encoder.conv_in", v.in_channels, ed[0], 3);
  int64_t flat = 0;
  for (int64_t i = 0; i < levels; ++i) {
    const int64_t in = ed[i], out = ed[i + 1];
    const std::string p = "encoder.down_blocks." + std::to_string(i);
    for (int64_t r = 0; r < v.num_res_blocks; ++r) {
      add_res(&t,
              res ? p + ".resnets." + std::to_string(r)
                  : "encoder.down_blocks." + std::to_string(flat++),
              r == 0 ? in : out, out);
    }
    if (i == levels - 1) continue;
    add_resample(&t, res ? p + ".downsampler" : "encoder.down_blocks." + std::to_string(flat++),
                 false, v.temperal_downsample[static_cast<size_t>(i)], out, out);
  }
  add_mid(&t, "encoder.mid_block", ed.back());
  t.push_back({"encoder.norm_out.gamma", {ed.back(), 1, 1, 1}, false});
  add_causal(&t, "encoder.conv_out", ed.back(), 2 * z, 3);
  add_causal(&t, "quant_conv", 2 * z, 2 * z, 1);
  return t;
}

}  // namespace qs::diffusion
