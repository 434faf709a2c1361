// server: chat messages whose content is a list of OpenAI content parts, turned into what the
// chat template renders, as vLLM's chat_utils does. `{"type": "text", "text"}`,
// `{"type": "image_url", "image_url": {"url"}}`, OpenAI's `{"type": "input_audio",
// "input_audio": {"data": <base64>, "format": "wav"}}` (read as the data URL
// data:audio/<format>;base64,<data>, as vLLM reads it), vLLM's `{"type": "audio_url",
// "audio_url": {"url"}}` and `{"type": "video_url", "video_url": {"url"}}` are read; other
// known part types (embeddings, files) are a 400 saying they are not supported, unknown ones vLLM's
// "Unknown part type". vLLM's two content formats, chosen by the template as vLLM detects it:
//   - "openai": the template loops over message content (Qwen2.5-VL's does), and sees the
//     parts as a list, text parts as {"type": "text", "text"}, images as {"type": "image"},
//     sound clips as {"type": "audio"}, videos as {"type": "video"};
//   - "string": content is one string, text parts joined by "\n", and each image, clip or video a
//     placeholder line before the text, in part order (vLLM's placeholders for a template
//     that has none).
#pragma once

#include <string>
#include <vector>

#include "server/openai_request.h"

namespace qs::server {

// vLLM's content-format detection: true when some `{% for x in y %}` of the template
// iterates over an expression naming `content` (message['content'], message.content, ...).
bool template_iterates_content(const std::string& source);

struct ChatMessages {
  Json messages = Json::array();        // what the template renders
  std::vector<std::string> image_urls;  // every image part's URL, in order
  std::vector<std::string> audio_urls;  // every sound clip's URL (input_audio: a data URL)
  std::vector<std::string> video_urls;  // every video part's URL
  std::string final_text;               // the last message's text (continue_final_message)
};

// The text an image, a clip or a video becomes in the "string" format.
struct MediaPlaceholders {
  std::string image, audio, video;
};

std::optional<ApiError> parse_chat_messages(const Json& messages, bool openai_format,
                                            const MediaPlaceholders& placeholders,
                                            ChatMessages* out);

}  // namespace qs::server
