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
  static const std::set<std::string> kTypes = {"image_pil",   "image_embeds", "audio_url",
                                               "input_audio", "audio_embeds", "video_url",
                                               "file",        "input_image",  "refusal"};
  return kTypes;
}

std::optional<ApiError> read_part(const Json& part, bool openai_format, Json* parts,
                                  std::vector<std::string>* texts, ChatMessages* out) {
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
    auto it = part.find("image_url");
    if (it == part.end() || !it->is_object() || !it->contains("url") || !(*it)["url"].is_string())
      return bad_request("An image_url content part needs 'image_url': {'url': ...}.", kParam);
    out->image_urls.push_back((*it)["url"].get<std::string>());
    if (openai_format) parts->push_back({{"type", "image"}});
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
                                            const std::string& image_placeholder,
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
    const size_t images_before = out->image_urls.size();
    for (const auto& part : content) {
      if (auto e = read_part(part, openai_format, &parts, &texts, out)) return e;
    }
    std::string joined;
    for (size_t i = 0; i < texts.size(); ++i) joined += (i ? "\n" : "") + texts[i];
    out->final_text = texts.empty() ? "" : texts.back();
    if (openai_format) {
      msg["content"] = std::move(parts);
    } else {
      // vLLM's string format: a placeholder line per image, then the text.
      std::string text;
      for (size_t i = images_before; i < out->image_urls.size(); ++i)
        text += image_placeholder + "\n";
      msg["content"] = text + joined;
      out->final_text = msg["content"].get<std::string>();
    }
    out->messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

}  // namespace qs::server
