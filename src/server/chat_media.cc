// server: a chat request's images, sound clips and videos (see chat_media.h).
#include "server/chat_media.h"

#include <string>

#include "server/media_url.h"
#include "vision/video_sound.h"

namespace qs::server {
namespace {

constexpr const char* kMessages = "messages";

// A modality's parts against the model and the limit; `noun` is the plural in messages.
std::optional<ApiError> check_count(size_t count, bool model_takes_it, const char* noun,
                                    const char* tower, int64_t limit, const char* key,
                                    const ModelInfo& model) {
  if (count == 0) return std::nullopt;
  if (!model_takes_it) {
    return bad_request("The model `" + model.served_model_name + "` does not accept " + noun +
                           " (it has no " + tower + ").",
                       kMessages);
  }
  if (static_cast<int64_t>(count) > limit) {
    return bad_request("At most " + std::to_string(limit) + " " + noun +
                           " may be provided in one prompt; the request has " +
                           std::to_string(count) + ". Set --limit-mm-per-prompt '{\"" + key +
                           "\": N}' to raise the limit.",
                       kMessages);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_mm_processor_kwargs(const Json& body, MediaRequestOptions* out) {
  constexpr const char* kKwargs = "mm_processor_kwargs";
  auto it = body.find(kKwargs);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return bad_request("'mm_processor_kwargs' must be an object.", kKwargs);
  for (const auto& [key, value] : it->items()) {
    if (key == "use_audio_in_video") {
      if (!value.is_boolean())
        return bad_request("mm_processor_kwargs.use_audio_in_video must be a boolean.", kKwargs);
      out->use_audio_in_video = value.get<bool>();
    } else if (key == "fps") {
      if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 120)
        return bad_request("mm_processor_kwargs.fps must be a number in (0, 120].", kKwargs);
      out->fps = value.get<double>();
    } else {
      return bad_request("mm_processor_kwargs key '" + key +
                             "' is not supported by quantserve (it reads use_audio_in_video and "
                             "fps).",
                         kKwargs);
    }
  }
  return std::nullopt;
}

MediaPlaceholders media_placeholders(const tok::Tokenizer& tokenizer, const MediaConfigs& media) {
  const vision::ImagePromptConfig* images = media.images;
  const audio::AudioPromptConfig* audio = media.audio;
  MediaPlaceholders out;
  if (images != nullptr) {
    out.image = tokenizer.decode(
        {images->vision_start_token_id, images->image_token_id, images->vision_end_token_id},
        /*skip_special=*/false);
  }
  if (audio != nullptr) {
    out.audio = tokenizer.decode(
        {audio->audio_start_token_id, audio->audio_token_id, audio->audio_end_token_id},
        /*skip_special=*/false);
  }
  if (media.videos != nullptr && images != nullptr) {  // videos share the images' markers
    out.video = tokenizer.decode(
        {images->vision_start_token_id, media.videos->video_token_id, images->vision_end_token_id},
        /*skip_special=*/false);
  }
  return out;
}

std::vector<models::PlaceholderKind> media_kinds(const MediaConfigs& media) {
  std::vector<models::PlaceholderKind> kinds;
  if (media.images != nullptr) kinds.push_back({media.images->image_token_id, "image"});
  if (media.audio != nullptr) kinds.push_back({media.audio->audio_token_id, "audio"});
  if (media.videos != nullptr) kinds.push_back({media.videos->video_token_id, "video"});
  return kinds;
}

std::optional<ApiError> prepare_chat_media(const ChatMessages& chat, const ModelInfo& model,
                                           const MediaRequestOptions& options,
                                           std::vector<models::PlaceholderItem>* items) {
  if (options.use_audio_in_video && !chat.video_urls.empty() && model.audio == nullptr) {
    return bad_request("The model `" + model.served_model_name +
                           "` cannot hear a video's sound (it has no audio tower): "
                           "use_audio_in_video needs Qwen2.5-Omni.",
                       "mm_processor_kwargs");
  }
  if (auto e = check_count(chat.image_urls.size(), model.images != nullptr, "images",
                           "vision tower", model.media.max_images_per_prompt, "image", model))
    return e;
  if (auto e = check_count(chat.audio_urls.size(), model.audio != nullptr, "audio clips",
                           "audio tower", model.media.max_audios_per_prompt, "audio", model))
    return e;
  if (auto e = check_count(chat.video_urls.size(), model.videos != nullptr, "videos",
                           "vision tower", model.media.max_videos_per_prompt, "video", model))
    return e;
  for (size_t i = 0; i < chat.image_urls.size(); ++i) {
    std::string bytes;
    if (auto e = load_media_url(chat.image_urls[i], model.media.allowed_local_media_path, &bytes))
      return e;
    Result<vision::PromptImage> image = vision::prepare_prompt_image(
        bytes, "image " + std::to_string(i + 1), model.images->processor);
    if (!image.ok()) return bad_request("Invalid image: " + image.status().message(), kMessages);
    items->push_back(vision::image_placeholder(*image, *model.images));
  }
  for (size_t i = 0; i < chat.audio_urls.size(); ++i) {
    std::string bytes;
    if (auto e = load_media_url(chat.audio_urls[i], model.media.allowed_local_media_path, &bytes))
      return e;
    Result<audio::PromptAudio> clip =
        audio::prepare_prompt_audio(bytes, "audio clip " + std::to_string(i + 1), *model.audio);
    if (!clip.ok()) return bad_request("Invalid audio: " + clip.status().message(), kMessages);
    items->push_back(audio::audio_placeholder(*clip, *model.audio));
  }
  for (size_t i = 0; i < chat.video_urls.size(); ++i) {
    std::string bytes;
    if (auto e = load_media_url(chat.video_urls[i], model.media.allowed_local_media_path, &bytes))
      return e;
    vision::VideoPromptOptions sampling;  // 2 frames a second unless the request says
    sampling.fps = options.fps;
    sampling.seconds = model.videos->seconds;
    const std::string name = "video " + std::to_string(i + 1);
    Result<vision::PromptVideo> video =
        vision::prepare_prompt_video(bytes, name, model.videos->processor, sampling);
    if (!video.ok()) return bad_request("Invalid video: " + video.status().message(), kMessages);
    // As transformers: a silent video is seen only, even when its sound was asked for.
    if (!options.use_audio_in_video || !video->has_audio) {
      items->push_back(vision::video_placeholder(*video, *model.videos));
      continue;
    }
    Result<models::PlaceholderItem> heard =
        vision::video_with_sound_placeholder(*video, bytes, name, *model.videos, *model.audio);
    if (!heard.ok()) return bad_request("Invalid video: " + heard.status().message(), kMessages);
    items->push_back(std::move(*heard));
  }
  return std::nullopt;
}

std::optional<ApiError> expand_chat_media(const ModelInfo& model,
                                          std::vector<models::PlaceholderItem> items,
                                          Prompt* prompt) {
  const std::vector<models::PlaceholderKind> kinds =
      media_kinds({model.images, model.audio, model.videos});
  if (kinds.empty()) return std::nullopt;
  Result<std::vector<models::MultimodalItem>> out =
      models::expand_placeholders(&prompt->ids, kinds, std::move(items));
  if (!out.ok()) {
    return bad_request("Invalid multimodal placeholders: " + out.status().message(), kMessages);
  }
  prompt->mm_items = std::move(*out);
  return std::nullopt;
}

}  // namespace qs::server
