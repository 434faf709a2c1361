// models: preset table for make-model and tests. Shapes from the published config.json of each
// model.
#include "models/model_presets.h"

namespace qs::models {
namespace {

struct Preset {
  const char* name;
  const char* config_json;
  // preprocessor_config.json of the multimodal models (nullptr: a text model).
  const char* preprocessor_json = nullptr;
};

// Qwen2.5-VL's image processor (Qwen/Qwen2.5-VL-3B-Instruct preprocessor_config.json): images
// of 4 to 16384 merged 28 x 28 tokens, OpenAI CLIP's mean and std.
#define QS_QWEN2_5_VL_IMAGE_PROCESSOR                                                   \
  R"("min_pixels":3136,"max_pixels":12845056,"patch_size":14,"temporal_patch_size":2,)" \
  R"("merge_size":2,"image_mean":[0.48145466,0.4578275,0.40821073],)"                   \
  R"("image_std":[0.26862954,0.26130258,0.27577711],"resample":3,)"                     \
  R"("rescale_factor":0.00392156862745098,"do_resize":true,"do_rescale":true,)"         \
  R"("do_normalize":true,"do_convert_rgb":true)"

const Preset kPresets[] = {
    {"qwen2.5-0.5b", R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
      "hidden_size":896,"intermediate_size":4864,"num_hidden_layers":24,
      "num_attention_heads":14,"num_key_value_heads":2,"vocab_size":151936,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":151643,
      "eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"qwen2.5-1.5b", R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",
      "hidden_size":1536,"intermediate_size":8960,"num_hidden_layers":28,
      "num_attention_heads":12,"num_key_value_heads":2,"vocab_size":151936,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":151643,
      "eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"qwen3-0.6b", R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3",
      "hidden_size":1024,"intermediate_size":3072,"num_hidden_layers":28,
      "num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,
      "max_position_embeddings":40960,"rope_theta":1000000,"rms_norm_eps":1e-6,
      "tie_word_embeddings":true,"attention_bias":false,"hidden_act":"silu",
      "bos_token_id":151643,"eos_token_id":151645,"torch_dtype":"bfloat16"})"},
    {"tinyllama-1.1b", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
      "hidden_size":2048,"intermediate_size":5632,"num_hidden_layers":22,
      "num_attention_heads":32,"num_key_value_heads":4,"vocab_size":32000,
      "max_position_embeddings":2048,"rope_theta":10000.0,"rms_norm_eps":1e-5,
      "tie_word_embeddings":false,"hidden_act":"silu","bos_token_id":1,"eos_token_id":2,
      "torch_dtype":"bfloat16"})"},
    {"llama-3.2-1b", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
      "hidden_size":2048,"intermediate_size":8192,"num_hidden_layers":16,
      "num_attention_heads":32,"num_key_value_heads":8,"head_dim":64,"vocab_size":128256,
      "max_position_embeddings":131072,"rope_theta":500000.0,"rms_norm_eps":1e-5,
      "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
        "original_max_position_embeddings":8192,"rope_type":"llama3"},
      "tie_word_embeddings":true,"hidden_act":"silu","bos_token_id":128000,
      "eos_token_id":128001,"torch_dtype":"bfloat16"})"},
    {"mistral-7b", R"({"architectures":["MistralForCausalLM"],"model_type":"mistral",
      "hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,
      "num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32768,
      "max_position_embeddings":32768,"rope_theta":1000000.0,"rms_norm_eps":1e-5,
      "sliding_window":null,"tie_word_embeddings":false,"hidden_act":"silu",
      "bos_token_id":1,"eos_token_id":2,"torch_dtype":"bfloat16"})"},
    // Mixture-of-Experts.
    {"qwen3-30b-a3b", R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe",
      "hidden_size":2048,"intermediate_size":6144,"moe_intermediate_size":768,
      "num_experts":128,"num_experts_per_tok":8,"norm_topk_prob":true,
      "decoder_sparse_step":1,"mlp_only_layers":[],"num_hidden_layers":48,
      "num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,
      "max_position_embeddings":40960,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":false,"attention_bias":false,"use_sliding_window":false,
      "hidden_act":"silu","bos_token_id":151643,"eos_token_id":151645,
      "torch_dtype":"bfloat16"})"},
    {"qwen1.5-moe-a2.7b", R"({"architectures":["Qwen2MoeForCausalLM"],"model_type":"qwen2_moe",
      "hidden_size":2048,"intermediate_size":5632,"moe_intermediate_size":1408,
      "shared_expert_intermediate_size":5632,"num_experts":60,"num_experts_per_tok":4,
      "norm_topk_prob":false,"decoder_sparse_step":1,"num_hidden_layers":24,
      "num_attention_heads":16,"num_key_value_heads":16,"vocab_size":151936,
      "max_position_embeddings":8192,"rope_theta":1000000.0,"rms_norm_eps":1e-6,
      "tie_word_embeddings":false,"use_sliding_window":false,"hidden_act":"silu",
      "bos_token_id":151643,"eos_token_id":151643,"torch_dtype":"bfloat16"})"},
    {"mixtral-8x7b", R"({"architectures":["MixtralForCausalLM"],"model_type":"mixtral",
      "hidden_size":4096,"intermediate_size":14336,"num_local_experts":8,
      "num_experts_per_tok":2,"num_hidden_layers":32,"num_attention_heads":32,
      "num_key_value_heads":8,"vocab_size":32000,"max_position_embeddings":32768,
      "rope_theta":1000000.0,"rms_norm_eps":1e-5,"sliding_window":null,
      "tie_word_embeddings":false,"hidden_act":"silu","bos_token_id":1,"eos_token_id":2,
      "torch_dtype":"bfloat16"})"},
    // Vision-language: Qwen/Qwen2.5-VL-3B-Instruct as on the hub (the decoder's fields at the
    // top, Qwen2.5-3B's with M-RoPE; the vision tower under vision_config).
    {"qwen2.5-vl-3b", R"({"architectures":["Qwen2_5_VLForConditionalGeneration"],
      "model_type":"qwen2_5_vl","hidden_size":2048,"intermediate_size":11008,
      "num_hidden_layers":36,"num_attention_heads":16,"num_key_value_heads":2,
      "vocab_size":151936,"max_position_embeddings":128000,"max_window_layers":70,
      "rope_theta":1000000.0,"rms_norm_eps":1e-6,"sliding_window":32768,
      "use_sliding_window":false,"tie_word_embeddings":true,"hidden_act":"silu",
      "rope_scaling":{"type":"mrope","mrope_section":[16,24,24]},
      "bos_token_id":151643,"eos_token_id":151645,"vision_start_token_id":151652,
      "vision_end_token_id":151653,"vision_token_id":151654,"image_token_id":151655,
      "video_token_id":151656,"torch_dtype":"bfloat16",
      "vision_config":{"depth":32,"hidden_act":"silu","hidden_size":1280,
        "intermediate_size":3420,"num_heads":16,"in_chans":3,"out_hidden_size":2048,
        "patch_size":14,"spatial_merge_size":2,"spatial_patch_size":14,"window_size":112,
        "fullatt_block_indexes":[7,15,23,31],"tokens_per_second":2,
        "temporal_patch_size":2}})",
     "{\"image_processor_type\":\"Qwen2VLImageProcessor\"," QS_QWEN2_5_VL_IMAGE_PROCESSOR "}"},
    // Qwen/Qwen2.5-Omni-7B's thinker (thinker_config of the hub's config.json, saved as
    // transformers 5 saves a Qwen2_5OmniThinkerForConditionalGeneration: the decoder, Qwen2.5-7B
    // with M-RoPE, under text_config). Its processor adds Whisper's 128-bin log-mel front end.
    {"qwen2.5-omni-7b", R"({"architectures":["Qwen2_5OmniThinkerForConditionalGeneration"],
      "model_type":"qwen2_5_omni_thinker","audio_token_index":151646,
      "image_token_index":151655,"video_token_index":151656,"vision_start_token_id":151652,
      "vision_end_token_id":151653,"audio_start_token_id":151647,"audio_end_token_id":151648,
      "user_token_id":872,"position_id_per_seconds":25,"seconds_per_chunk":2,
      "bos_token_id":151643,"eos_token_id":151645,"tie_word_embeddings":false,
      "torch_dtype":"bfloat16",
      "text_config":{"model_type":"qwen2_5_omni_text","hidden_size":3584,
        "intermediate_size":18944,"num_hidden_layers":28,"num_attention_heads":28,
        "num_key_value_heads":4,"vocab_size":152064,"max_position_embeddings":32768,
        "max_window_layers":28,"rms_norm_eps":1e-6,"rope_theta":1000000.0,
        "rope_scaling":{"mrope_section":[16,24,24],"rope_type":"default","type":"default"},
        "sliding_window":32768,
        "use_sliding_window":false,"tie_word_embeddings":false,"hidden_act":"silu"},
      "vision_config":{"model_type":"qwen2_5_omni_vision_encoder","depth":32,
        "hidden_act":"silu","hidden_size":1280,"intermediate_size":3420,"num_heads":16,
        "in_channels":3,"out_hidden_size":3584,"patch_size":14,"spatial_merge_size":2,
        "temporal_patch_size":2,"window_size":112,"fullatt_block_indexes":[7,15,23,31]},
      "audio_config":{"model_type":"qwen2_5_omni_audio_encoder","num_mel_bins":128,
        "d_model":1280,"encoder_layers":32,"encoder_attention_heads":20,
        "encoder_ffn_dim":5120,"activation_function":"gelu","scale_embedding":false,
        "max_source_positions":1500,"n_window":100,"output_dim":3584}})",
     "{\"image_processor_type\":\"Qwen2VLImageProcessor\"," QS_QWEN2_5_VL_IMAGE_PROCESSOR
     R"(,"feature_extractor_type":"WhisperFeatureExtractor","feature_size":128,
      "sampling_rate":16000,"hop_length":160,"n_fft":400,"chunk_length":300,
      "n_samples":4800000,"nb_max_frames":30000,"padding_side":"right","padding_value":0.0,
      "dither":0.0,"return_attention_mask":true,"processor_class":"Qwen2_5OmniProcessor"})"},
};

#undef QS_QWEN2_5_VL_IMAGE_PROCESSOR

}  // namespace

Result<nlohmann::json> model_preset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return nlohmann::json::parse(p.config_json);
  }
  std::string known;
  for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown model preset '" + name + "'; known: " + known);
}

Result<nlohmann::json> model_preset_preprocessor(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    if (p.preprocessor_json == nullptr) return nlohmann::json();
    return nlohmann::json::parse(p.preprocessor_json);
  }
  return model_preset(name).status();
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.push_back(p.name);
  return names;
}

}  // namespace qs::models
