// audio: Whisper, transformers' WhisperForConditionalGeneration: an encoder over 30 s of
// log-mel frames (two 3-wide conv1d with GELU, the second of stride 2, fixed sinusoidal
// positions, pre-LayerNorm blocks) and a decoder (learned positions, causal self-attention
// over its own keys and values, cross-attention over the encoder's output, the output
// projection tied to the token embedding unless proj_out.weight is stored). Every matmul is
// an ops::LinearWeight read through models::Component, so an AutoRound/GPTQ/AWQ checkpoint's
// linears run the same kernels a text model's do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/component.h"
#include "ops/linear.h"

namespace qs::audio {

struct WhisperConfig {
  int64_t vocab_size = 51865;
  int64_t num_mel_bins = 80;
  int64_t d_model = 384;
  int64_t encoder_layers = 4, encoder_attention_heads = 6, encoder_ffn_dim = 1536;
  int64_t decoder_layers = 4, decoder_attention_heads = 6, decoder_ffn_dim = 1536;
  int64_t max_source_positions = 1500;  // encoder output rows; the input has twice as many
  int64_t max_target_positions = 448;   // decoder positions, prompt included
  bool scale_embedding = false;
  float layer_norm_eps = 1e-5f;  // nn.LayerNorm's default, which Whisper never changes

  int64_t input_frames() const { return 2 * max_source_positions; }
};

// config.json's fields, checked (sizes in range, heads dividing d_model, "gelu").
Result<WhisperConfig> read_whisper_config(const models::Component& c);

// One attention: q, k, v, out projections (Whisper's k_proj has no bias).
struct WhisperAttention {
  ops::LinearWeight q, k, v, o;
  std::vector<float> bq, bv, bo;
};

struct WhisperLayer {
  std::string prefix;  // "model.encoder.layers.0": the linears' checkpoint names start with it
  std::vector<float> ln_attn_w, ln_attn_b;
  WhisperAttention attn;
  std::vector<float> ln_cross_w, ln_cross_b;  // decoder layers only
  WhisperAttention cross;                     // decoder layers only
  std::vector<float> ln_ffn_w, ln_ffn_b;
  ops::LinearWeight fc1, fc2;
  std::vector<float> b1, b2;
};

// What the decoder keeps for one sequence: the self-attention keys and values of every
// position fed so far, and the cross-attention keys and values of its audio window, which are
// projected once from the encoder output (start()) and read at every step. Copies share the
// cross-attention part, which never changes: the hypotheses of a window's best-of start from
// one prompt state without copying the window's keys and values.
struct WhisperDecoderState {
  int64_t length = 0;                 // positions fed so far
  int64_t n_src = 0;                  // encoder rows
  std::vector<float> self_k, self_v;  // [decoder_layers, max_target_positions, d_model]
  std::shared_ptr<const std::vector<float>> cross_k, cross_v;  // [decoder_layers, n_src, d_model]
};

// Hears each block linear's input just before the linear runs: its checkpoint name without
// ".weight" ("model.decoder.layers.1.encoder_attn.k_proj") and its input rows x [m, k]. The
// imatrix of OPT-RTN (quant/whisper_calibration.h) is collected through it; serving sets none.
using LinearObserver =
    std::function<void(const std::string& module, const float* x, int64_t m, int64_t k)>;

// Whisper's encoder layers over x [n, d_model] in place, attention confined to each segment
// [bounds[i], bounds[i + 1]): one segment for a Whisper window, the chunks of Qwen2.5-Omni's
// audio tower. `observer` may be empty.
Status run_encoder_layers(std::span<const WhisperLayer> layers, int64_t heads, float eps,
                          std::span<const int64_t> bounds, float* x, int64_t n,
                          const LinearObserver& observer, ThreadPool& pool);

class WhisperModel {
 public:
  static Result<WhisperModel> load(const std::string& dir);
  const WhisperConfig& config() const { return config_; }
  const models::Component& weights() const { return weights_; }
  // encode(), start() and decode() call `observer` before every block linear (q, k and v each
  // with the same rows); empty (the default) calls nothing and costs nothing.
  void set_linear_observer(LinearObserver observer) { observer_ = std::move(observer); }

  // features [num_mel_bins, input_frames()] (one 30 s window) -> out [max_source_positions,
  // d_model], the encoder's last_hidden_state.
  Status encode(const float* features, std::vector<float>* out, ThreadPool& pool) const;

  // A fresh sequence over `enc` [n_src, d_model] (an encode() output).
  Status start(const float* enc, int64_t n_src, WhisperDecoderState* state, ThreadPool& pool) const;

  // Feeds tokens[i] to states[i] for every i in one batched pass (the rows of all states go
  // through each linear together) and writes the logits of each state's last new token,
  // [states, vocab_size], or of every new token when `all_logits`, [total tokens, vocab]
  // in state order. Fails, changing no state, when a state would pass max_target_positions
  // or a token id is out of range.
  Status decode(std::span<WhisperDecoderState* const> states,
                std::span<const std::vector<int32_t>> tokens, bool all_logits,
                std::vector<float>* logits, ThreadPool& pool) const;

 private:
  WhisperConfig config_;
  models::Component weights_;
  std::vector<float> conv1_w_, conv1_b_, conv2_w_, conv2_b_;
  std::vector<float> enc_pos_;  // [max_source_positions, d_model]
  std::vector<WhisperLayer> enc_layers_;
  std::vector<float> enc_ln_w_, enc_ln_b_;
  Tensor tok_emb_;              // [vocab, d_model] as stored; rows read on lookup
  std::vector<float> dec_pos_;  // [max_target_positions, d_model]
  std::vector<WhisperLayer> dec_layers_;
  std::vector<float> dec_ln_w_, dec_ln_b_;
  ops::LinearWeight proj_out_;  // the token embedding, or proj_out.weight when untied
  LinearObserver observer_;
};

}  // namespace qs::audio
