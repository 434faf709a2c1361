// diffusion: transformers' CLIPTextModel, FLUX.1's first text encoder: token + position
// embeddings, pre-LayerNorm blocks with causal self-attention and a quick-GELU MLP, a final
// LayerNorm; the pooled output is the final hidden state at the end-of-text token. FLUX uses
// only the pooled vector (77 tokens in, one [hidden] vector out).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "ops/linear.h"

namespace qs::diffusion {

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = 77;
  float layer_norm_eps = 1e-5f;
  std::string hidden_act = "quick_gelu";
  // eos_token_id 2 is the legacy value of openai/clip-vit-large-patch14's config, where
  // transformers pools at argmax(input_ids) instead (the highest id is <|endoftext|>).
  int64_t eos_token_id = 2;
};

struct ClipLayer {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // [hidden]
  ops::LinearWeight q, k, v, o;                   // [hidden, hidden]
  std::vector<float> bq, bk, bv, bo;              // [hidden]
  ops::LinearWeight fc1, fc2;                     // [inter, hidden], [hidden, inter]
  std::vector<float> b1, b2;
};

class ClipTextModel {
 public:
  static Result<ClipTextModel> load(const std::string& dir);
  const ClipTextConfig& config() const { return config_; }

  // ids: [n] token ids (n <= max_position_embeddings); hidden: [n, hidden_size] the
  // last_hidden_state; pooled: [hidden_size] the pooler_output. Either may be null.
  Status forward(const std::vector<int32_t>& ids, std::vector<float>* hidden,
                 std::vector<float>* pooled, ThreadPool& pool) const;

 private:
  ClipTextConfig config_;
  models::Component weights_;
  std::vector<float> token_emb_, pos_emb_;  // [vocab, hidden], [max_pos, hidden]
  std::vector<ClipLayer> layers_;
  std::vector<float> final_w_, final_b_;
};

}  // namespace qs::diffusion
