// server: the images, sound clips and videos of a chat request, between parsing (chat_content.h)
// and the engine: first the checks that need no decoding (a model with the tower the modality
// needs, vLLM's --limit-mm-per-prompt), then each part fetched (media_url.h) and processed
// (vision::prepare_prompt_image, audio::prepare_prompt_audio, vision::prepare_prompt_video),
// and, once the template has
// rendered and the text is tokenized, each placeholder widened to its item's tokens
// (models::expand_placeholders). Every refusal is a 400 naming the part.
#pragma once

#include <optional>
#include <vector>

#include "models/placeholders.h"
#include "server/chat_content.h"
#include "server/openai_request.h"

namespace qs::server {

// What a model takes besides text; a null config: not that modality.
struct MediaConfigs {
  const vision::ImagePromptConfig* images = nullptr;
  const audio::AudioPromptConfig* audio = nullptr;
  const vision::VideoPromptConfig* videos = nullptr;
};

// What an image, a clip or a video becomes in vLLM's "string" content format: the model's
// marker tokens around its placeholder (empty for a modality the model lacks).
MediaPlaceholders media_placeholders(const tok::Tokenizer& tokenizer, const MediaConfigs& media);

// The placeholder tokens of the modalities the model takes.
std::vector<models::PlaceholderKind> media_kinds(const MediaConfigs& media);

// vLLM's per-request `mm_processor_kwargs` that this server reads: "use_audio_in_video"
// (Qwen2.5-Omni hears each video's own sound track with it) and "fps" (video frames sampled a
// second, 2 by default). Other keys are a 400.
struct MediaRequestOptions {
  bool use_audio_in_video = false;
  double fps = 2.0;
};
std::optional<ApiError> read_mm_processor_kwargs(const Json& body, MediaRequestOptions* out);

// The chat's images, clips and videos, processed, in part order within each modality.
std::optional<ApiError> prepare_chat_media(const ChatMessages& chat, const ModelInfo& model,
                                           const MediaRequestOptions& options,
                                           std::vector<models::PlaceholderItem>* items);

// Widens the placeholders of prompt->ids and sets prompt->mm_items.
std::optional<ApiError> expand_chat_media(const ModelInfo& model,
                                          std::vector<models::PlaceholderItem> items,
                                          Prompt* prompt);

}  // namespace qs::server
