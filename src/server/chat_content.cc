// server: chat content parts (see chat_content.h). Names and messages follow vLLM's
// entrypoints/chat_utils.py.
#include "server/chat_content.h"

#include <set>

#include "server/json_fields.h"

namespace qs::server {
namespace {

constexpr const char* kParam = "messages";

// Part types vLLM knows that this server does not read.
const std::set<std::string>& unsupported_part_types() {
  static const std::set<std::string> kTypes = {"image_pil", "image_embeds", "audio_embeds",
                                               "file",      "input_image",  "refusal"};
  return kTypes;
}

// A part's {"url": string} object under `key`, or nullopt.
std::optional<std::string> url_of(const Json& part, const char* key) {
  auto it = part.find(key);
  if (it == part.end() || !it->is_object() || !it->contains("url") || !(*it)["url"].is_string())
    return std::nullopt;
  return (*it)["url"].get<std::string>();
}

// OpenAI's input_audio, as the data URL vLLM makes of it. The format names the container
// (wav, mp3, flac, ...); the decoder reads the bytes themselves, so it only has to be a word.
std::optional<ApiError> input_audio_url(const Json& part, std::string* url) {
  auto it = part.find("input_audio");
  if (it == part.end() || !it->is_object() || !it->contains("data") || !(*it)["data"].is_string() ||
      !it->contains("format") || !(*it)["format"].is_string())
    return bad_request(
        "An input_audio content part needs 'input_audio': {'data': <base64>, 'format': ...}.",
        kParam);
  const std::string format = (*it)["format"].get<std::string>();
  if (format.empty() || format.size() > 16 ||
      format.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") != std::string::npos)
    return bad_request("input_audio's 'format' must be a file type such as 'wav' or 'mp3'.",
                       kParam);
  *url = "data:audio/" + format + ";base64," + (*it)["data"].get<std::string>();
  return std::nullopt;
}

// The parts' order, for the "string" format's placeholder lines.
enum class Media { kImage, kAudio, kVideo };

std::optional<ApiError> read_part(const Json& part, bool openai_format, Json* parts,
                                  std::vector<std::string>* texts, std::vector<Media>* media,
                                  ChatMessages* out) {
  if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
    return bad_request("Each content part must be an object with a string 'type'.", kParam);
  const std::string type = part["type"].get<std::string>();
  if (type == "text") {
    if (!part.contains("text") || !part["text"].is_string())
      return bad_request("A text content part needs a string 'text'.", kParam);
    const std::string text = part["text"].get<std::string>();
    texts->push_back(text);
    if (openai_format) parts->push_back({{"type", "text"}, {"text", text}});
    return std::nullopt;
  }
  if (type == "image_url") {
    std::optional<std::string> url = url_of(part, "image_url");
    if (!url)
      return bad_request("An image_url content part needs 'image_url': {'url': ...}.", kParam);
    out->image_urls.push_back(std::move(*url));
    media->push_back(Media::kImage);
    if (openai_format) parts->push_back({{"type", "image"}});
    return std::nullopt;
  }
  if (type == "video_url") {
    std::optional<std::string> url = url_of(part, "video_url");
    if (!url)
      return bad_request("A video_url content part needs 'video_url': {'url': ...}.", kParam);
    out->video_urls.push_back(std::move(*url));
    media->push_back(Media::kVideo);
    if (openai_format) parts->push_back({{"type", "video"}});
    return std::nullopt;
  }
  if (type == "input_audio" || type == "audio_url") {
    std::string url;
    if (type == "input_audio") {
      if (auto e = input_audio_url(part, &url)) return e;
    } else {
      std::optional<std::string> u = url_of(part, "audio_url");
      if (!u)
        return bad_request("An audio_url content part needs 'audio_url': {'url': ...}.", kParam);
      url = std::move(*u);
    }
    out->audio_urls.push_back(std::move(url));
    media->push_back(Media::kAudio);
    if (openai_format) parts->push_back({{"type", "audio"}});
    return std::nullopt;
  }
  if (unsupported_part_types().count(type)) {
    return bad_request("Content parts of type '" + type + "' are not supported by quantserve.",
                       kParam);
  }
  return bad_request("Unknown part type: " + type, kParam);
}

}  // namespace

bool template_iterates_content(const std::string& source) {
  size_t pos = 0;
  while ((pos = source.find("{%", pos)) != std::string::npos) {
    const size_t end = source.find("%}", pos + 2);
    if (end == std::string::npos) return false;
    std::string stmt = source.substr(pos + 2, end - pos - 2);
    pos = end + 2;
    const size_t first = stmt.find_first_not_of("-+ \t\r\n");
    if (first == std::string::npos || stmt.compare(first, 4, "for ") != 0) continue;
    const size_t in = stmt.find(" in ", first + 4);
    if (in != std::string::npos && stmt.find("content", in + 4) != std::string::npos) return true;
  }
  return false;
}

std::optional<ApiError> parse_chat_messages(const Json& messages, bool openai_format,
                                            const MediaPlaceholders& placeholders,
                                            ChatMessages* out) {
  if (!messages.is_array() || messages.empty())
    return bad_request("'messages' must be a non-empty list of messages.", kParam);
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return bad_request("Each message must be an object with a string 'role'.", kParam);
    Json msg = m;
    const Json content = m.contains("content") ? m["content"] : Json();
    if (content.is_null() || content.is_string()) {
      out->final_text = content.is_null() ? "" : content.get<std::string>();
      msg["content"] = out->final_text;
      out->messages.push_back(std::move(msg));
      continue;
    }
    if (!content.is_array()) {
      return type_error(kParam, "a list of messages whose content is a string or a list of parts");
    }
    Json parts = Json::array();
    std::vector<std::string> texts;
    std::vector<Media> media;
    for (const auto& part : content) {
      if (auto e = read_part(part, openai_format, &parts, &texts, &media, out)) return e;
    }
    std::string joined;
    for (size_t i = 0; i < texts.size(); ++i) joined += (i ? "\n" : "") + texts[i];
    out->final_text = texts.empty() ? "" : texts.back();
    if (openai_format) {
      msg["content"] = std::move(parts);
    } else {
      // vLLM's string format: a placeholder line per image, clip or video, then the text.
      std::string text;
      for (const Media part : media) {
        text += (part == Media::kImage   ? placeholders.image
                 : part == Media::kAudio ? placeholders.audio
                                         : placeholders.video) +
                "\n";
      }
      msg["content"] = text + joined;
      out->final_text = msg["content"].get<std::string>();
    }
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace qs::server
