// server: /v1/audio/transcriptions form parsing (see transcriptions_request.h). Field names
// and values are OpenAI's audio API; messages name the field as vLLM's do.
#include "server/transcriptions_request.h"

#include <httplib.h>

#include <cctype>
#include <cstdlib>
#include <set>

namespace qs::server {
namespace {

// Whisper's language codes are two or three letters ("en", "haw", "yue"); anything much
// longer is no language, and the handler checks the model's own list.
constexpr size_t kMaxLanguageChars = 16;
// Whisper conditions on at most max_target_positions / 2 - 1 tokens of prompt (223 for the
// released models); a prompt longer than this can only be a mistake or an attack on the
// tokenizer's time.
constexpr size_t kMaxPromptBytes = 64 * 1024;

const std::set<std::string>& handled_fields() {
  static const std::set<std::string> kFields = {"file",
                                                "model",
                                                "language",
                                                "prompt",
                                                "response_format",
                                                "temperature",
                                                "timestamp_granularities[]",
                                                "timestamp_granularities",
                                                "stream"};
  return kFields;
}

// A number in [0, 1], as the whole of the text ("0", "0.2", "1e-1").
bool parse_temperature(const std::string& text, double* out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}

std::optional<ApiError> check_granularity(const std::string& value) {
  const std::string param = "timestamp_granularities";
  if (value == "segment") return std::nullopt;
  if (value == "word") {
    return bad_request(
        "Word-level timestamps are not supported; timestamp_granularities accepts 'segment'.",
        param);
  }
  return bad_request("'" + value + "' is not a timestamp granularity: expected 'segment'.", param);
}

std::optional<ApiError> check_language(const std::string& language) {
  if (language.size() > kMaxLanguageChars) {
    return bad_request("'language' must be a language code such as 'en'.", "language");
  }
  for (char c : language) {
    if (!std::isalpha(static_cast<unsigned char>(c))) {
      return bad_request("'language' must be a language code such as 'en', got '" + language + "'.",
                         "language");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_transcriptions_request(const httplib::Request& req,
                                                     const std::string& served_model_name,
                                                     TranscriptionsRequest* out) {
  if (!req.is_multipart_form_data()) {
    return bad_request(
        "The request must be multipart/form-data, with the audio in a 'file' field "
        "(got Content-Type '" +
            req.get_header_value("Content-Type") + "').",
        "file");
  }
  const auto file = req.files.find("file");
  if (file == req.files.end()) {
    return bad_request("'file' is required: the audio to transcribe, as a multipart file field.",
                       "file");
  }
  out->file = file->second.content;
  out->file_name = file->second.filename.empty() ? "file" : file->second.filename;

  // The first part of each name counts, as Starlette's form.get() takes it.
  auto text = [&req](const std::string& key) -> std::optional<std::string> {
    const auto it = req.files.find(key);
    if (it == req.files.end()) return std::nullopt;
    return it->second.content;
  };
  if (auto model = text("model"); model && !model->empty() && *model != served_model_name) {
    return model_not_found(*model);
  }
  if (auto language = text("language")) {
    if (auto e = check_language(*language)) return e;
    out->language.clear();
    for (char c : *language) {
      out->language += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (auto prompt = text("prompt")) {
    if (prompt->size() > kMaxPromptBytes) {
      return bad_request("'prompt' is longer than " + std::to_string(kMaxPromptBytes) + " bytes.",
                         "prompt");
    }
    out->prompt = *prompt;
  }
  if (auto format = text("response_format")) {
    const std::optional<audio::TranscriptFormat> f = audio::parse_transcript_format(*format);
    if (!f) {
      return bad_request("'" + *format +
                             "' is not a response_format: expected json, text, srt, "
                             "verbose_json or vtt.",
                         "response_format");
    }
    out->response_format = *f;
  }
  if (auto temperature = text("temperature")) {
    if (!parse_temperature(*temperature, &out->temperature)) {
      return bad_request("'temperature' must be a number from 0 to 1, got '" + *temperature + "'.",
                         "temperature");
    }
  }
  for (const char* key : {"timestamp_granularities[]", "timestamp_granularities"}) {
    const auto [begin, end] = req.files.equal_range(key);
    for (auto it = begin; it != end; ++it) {
      if (auto e = check_granularity(it->second.content)) return e;
    }
  }
  static const std::set<std::string> kNotStreaming = {"", "false", "False", "0"};
  if (auto stream = text("stream"); stream && !kNotStreaming.count(*stream)) {
    return bad_request("Streaming transcriptions are not supported: leave 'stream' unset.",
                       "stream");
  }
  for (const auto& [name, part] : req.files) {
    if (!handled_fields().count(name) &&
        (out->ignored_fields.empty() || out->ignored_fields.back() != name)) {
      out->ignored_fields.push_back(name);
    }
  }
  return std::nullopt;
}

}  // namespace qs::server
