// vision: Qwen2.5-Omni's use_audio_in_video, a video heard as well as seen. The video's own
// sound track (video_audio.cc) becomes the clip frames the Omni processor's feature extractor
// keeps (audio::whisper_features_masked) and rides on the video's item (MultimodalItem's
// `frames` / `features`); the template's one <|VIDEO|> then becomes what
// Qwen2_5OmniProcessor.replace_video_with_audio_token writes: <|audio_bos|>, the video's and the
// track's placeholders interleaved in seconds_per_chunk chunks of TMRoPE ticks
// (models::audio_in_video_chunks), <|audio_eos|>, inside the template's <|vision_bos|> ...
// <|vision_eos|>.
#pragma once

#include <string>
#include <string_view>

#include "audio/audio_prompt.h"
#include "core/status.h"
#include "models/placeholders.h"
#include "vision/video_prompt.h"

namespace qs::vision {

// `video` (from prepare_prompt_video on `bytes`) with its sound track; a video without sound
// is an error saying so (the caller decides whether that is fine).
Result<models::PlaceholderItem> video_with_sound_placeholder(const PromptVideo& video,
                                                             std::string_view bytes,
                                                             const std::string& name,
                                                             const VideoPromptConfig& config,
                                                             const audio::AudioPromptConfig& clips);

}  // namespace qs::vision
