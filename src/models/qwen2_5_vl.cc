// models: the decoders of Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) and of Qwen2.5-Omni's
// thinker (Qwen2_5OmniThinkerForConditionalGeneration): Qwen2's blocks (q/k/v bias) under
// multimodal RoPE, whose head_dim / 2 frequencies are split into temporal, height and width
// sections (rope_scaling / rope_parameters "mrope_section"); the towers' tensors (visual.*,
// audio_tower.*) are the towers', and the prompt's placeholders are filled with their output
// (ForwardBatch::embeddings). Both read what their 3-D positions need (mrope.h): the merge size
// and, for VL, tokens_per_second; for the thinker, TMRoPE's clock and the audio markers.
#include "models/families.h"

namespace qs::models {

namespace {

Result<int32_t> placeholder_id(const nlohmann::json& config, const char* key) {
  QS_ASSIGN_OR_RETURN(auto v, json_int(config, key));
  if (!v) return -1;
  if (*v < 0 || *v > INT32_MAX) {
    return invalid_argument(std::string("config field '") + key + "' is out of range");
  }
  return static_cast<int32_t>(*v);
}

}  // namespace

namespace {

// The M-RoPE sections and the vision tower's settings, shared by both families. The
// placeholder ids are read by the caller: the two configs name them differently.
Status parse_mrope_vision(const nlohmann::json& config, ModelConfig* out) {
  QS_RETURN_IF_ERROR(parse_qwen2_family(config, out));
  const nlohmann::json* rope = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_object() && it->contains("mrope_section")) rope = &*it;
  }
  if (rope == nullptr) return invalid_argument("the config needs rope_scaling.mrope_section");
  const nlohmann::json& section = (*rope)["mrope_section"];
  if (!section.is_array() || section.size() != 3) {
    return invalid_argument("config field 'mrope_section' must list three sizes");
  }
  int64_t sum = 0;
  for (const auto& v : section) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return invalid_argument("config field 'mrope_section' must hold sizes >= 0");
    }
    out->mrope_section.push_back(v.get<int64_t>());
    sum += v.get<int64_t>();
  }
  if (sum != out->head_dim / 2) {
    return invalid_argument("config field 'mrope_section' sums to " + std::to_string(sum) +
                            ", not head_dim / 2 = " + std::to_string(out->head_dim / 2));
  }
  QS_ASSIGN_OR_RETURN(out->vision_start_token_id, placeholder_id(config, "vision_start_token_id"));
  QS_ASSIGN_OR_RETURN(out->vision_end_token_id, placeholder_id(config, "vision_end_token_id"));
  const auto vision = config.find("vision_config");
  if (vision == config.end() || !vision->is_object()) {
    return invalid_argument("the config needs its vision_config");
  }
  QS_ASSIGN_OR_RETURN(auto merge, json_int(*vision, "spatial_merge_size"));
  out->vision_merge_size = merge.value_or(2);  // Qwen2_5_VLVisionConfig's default
  if (out->vision_merge_size < 1 || out->vision_merge_size > 16) {
    return invalid_argument("vision_config field 'spatial_merge_size' must be 1 to 16");
  }
  QS_ASSIGN_OR_RETURN(auto tps, json_double(*vision, "tokens_per_second"));
  out->vision_tokens_per_second = tps.value_or(2.0);
  if (!(out->vision_tokens_per_second >= 0 && out->vision_tokens_per_second <= 1000)) {
    return invalid_argument("vision_config field 'tokens_per_second' must be 0 to 1000");
  }
  out->tower_prefixes = {"visual."};
  return ok_status();
}

}  // namespace

Status parse_qwen2_5_vl_family(const nlohmann::json& config, ModelConfig* out) {
  QS_RETURN_IF_ERROR(parse_mrope_vision(config, out));
  QS_ASSIGN_OR_RETURN(out->image_token_id, placeholder_id(config, "image_token_id"));
  QS_ASSIGN_OR_RETURN(out->video_token_id, placeholder_id(config, "video_token_id"));
  return ok_status();
}

Status parse_qwen2_5_omni_thinker_family(const nlohmann::json& config, ModelConfig* out) {
  QS_RETURN_IF_ERROR(parse_mrope_vision(config, out));
  QS_ASSIGN_OR_RETURN(out->image_token_id, placeholder_id(config, "image_token_index"));
  QS_ASSIGN_OR_RETURN(out->video_token_id, placeholder_id(config, "video_token_index"));
  QS_ASSIGN_OR_RETURN(out->audio_token_id, placeholder_id(config, "audio_token_index"));
  QS_ASSIGN_OR_RETURN(out->audio_start_token_id, placeholder_id(config, "audio_start_token_id"));
  QS_ASSIGN_OR_RETURN(out->audio_end_token_id, placeholder_id(config, "audio_end_token_id"));
  // TMRoPE's clock; absent fields take Qwen2_5OmniThinkerConfig's defaults (25 ticks a
  // second, 2 s chunks), as transformers would.
  QS_ASSIGN_OR_RETURN(auto per_second, json_double(config, "position_id_per_seconds"));
  out->position_id_per_seconds = per_second.value_or(25.0);
  if (!(out->position_id_per_seconds > 0 && out->position_id_per_seconds <= 1000)) {
    return invalid_argument("config field 'position_id_per_seconds' must be above 0, to 1000");
  }
  QS_ASSIGN_OR_RETURN(auto chunk, json_double(config, "seconds_per_chunk"));
  out->seconds_per_chunk = chunk.value_or(2.0);
  if (!(out->seconds_per_chunk > 0 && out->seconds_per_chunk <= 3600)) {
    return invalid_argument("config field 'seconds_per_chunk' must be above 0, to 3600");
  }
  const auto audio = config.find("audio_config");
  if (audio == config.end() || !audio->is_object()) {
    return invalid_argument("a Qwen2.5-Omni thinker config needs its audio_config");
  }
  out->tower_prefixes.push_back("audio_tower.");
  return ok_status();
}

}  // namespace qs::models
