// diffusion: transformers' T5EncoderModel in its v1.1 form (FLUX.1's second text encoder,
// T5-XXL) and UMT5EncoderModel (Wan's, umt5-xxl): RMS-style T5LayerNorm before each sublayer,
// unscaled self-attention with a learned bias per relative-position bucket, and a gated-GELU
// feed-forward. T5 learns the bias table in its first block only and every block reuses it;
// UMT5 (config.json model_type "umt5") has one per block. FluxPipeline runs T5 without a mask
// (the padding is attended too); WanPipeline passes the tokenizer's attention mask.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "ops/linear.h"

namespace qs::diffusion {

struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t num_heads = 64;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;
  bool gated = true;              // feed_forward_proj "gated-gelu" (v1.1); "relu" for v1.0
  std::string act = "gelu_new";   // dense_act_fn
  std::string model_type = "t5";  // or "umt5": a relative-position bias in every block
};

struct T5Layer {
  // [num_buckets, heads]: block 0's, and with UMT5 every block's; empty where the block
  // reuses the bias of the block before it (T5).
  std::vector<float> rel_bias;
  std::vector<float> ln_attn, ln_ff;  // [d_model]
  ops::LinearWeight q, k, v;          // [heads * d_kv, d_model]
  ops::LinearWeight o;                // [d_model, heads * d_kv]
  ops::LinearWeight wi_0, wi_1, wo;   // [d_ff, d_model] x2 (wi_1 only when gated), [d_model, d_ff]
};

class T5Encoder {
 public:
  static Result<T5Encoder> load(const std::string& dir);
  const T5Config& config() const { return config_; }

  // ids: [n]; hidden: [n, d_model], the last_hidden_state, every token attending every token.
  Status forward(const std::vector<int32_t>& ids, std::vector<float>* hidden,
                 ThreadPool& pool) const;
  // As above with transformers' attention_mask 1 on the first n_valid tokens and 0 on the
  // rest (a tokenizer's right padding; 1 <= n_valid <= n): no token attends to the padding,
  // whose own rows are still computed, as UMT5EncoderModel(ids, attention_mask) returns them.
  Status forward(const std::vector<int32_t>& ids, int64_t n_valid, std::vector<float>* hidden,
                 ThreadPool& pool) const;

 private:
  T5Config config_;
  models::Component weights_;
  // [vocab, d_model], the checkpoint's view in its own float type: rows are converted as they
  // are looked up, since umt5-xxl's 256384 x 4096 table would take 4.2 GB as f32.
  Tensor embed_;
  std::vector<T5Layer> layers_;
  std::vector<float> final_ln_;
};

// text_encoder/config.json (T5 or UMT5), checked: what load() runs, and what inspect sizes a
// component whose weights are absent from.
Result<T5Config> read_t5_config(const models::Component& c);

// T5Attention._relative_position_bucket, bidirectional: the bucket of key - query.
int64_t t5_relative_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);

}  // namespace qs::diffusion
