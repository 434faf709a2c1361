// server: POST /v1/audio/transcriptions forms (OpenAI's audio API, as vLLM's
// TranscriptionRequest reads it) parsed into a plain struct. The body is multipart/form-data:
// the audio in `file`, every other field a text part. Everything that can be checked without
// the model or the audio's bytes is checked here, each mistake a 400 naming its field (a model
// other than the served one: 404, as the other endpoints); decoding the audio is the handler's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "audio/transcript_format.h"
#include "server/openai_request.h"

namespace httplib {
struct Request;
}  // namespace httplib

namespace qs::server {

struct TranscriptionsRequest {
  std::string_view file;  // the upload's bytes, a view into the request's form
  std::string file_name;  // the upload's name, for messages ("file" when it gave none)
  std::string language;   // "" = the model decides (detected, or English on an English-only one)
  std::string prompt;     // conditions the first window (names, spelling)
  audio::TranscriptFormat response_format = audio::TranscriptFormat::kJson;
  // OpenAI's rule: 0 lets Whisper raise the temperature while a window's text is too
  // repetitive or unlikely (the fallback list); t > 0 samples at t alone.
  double temperature = 0.0;
  std::vector<std::string> ignored_fields;  // parts neither OpenAI nor vLLM define
};

// Parses the form of `req` against the served model's name. On error returns it and leaves
// *out unspecified; on success *out views `req`, which must outlive it.
std::optional<ApiError> parse_transcriptions_request(const httplib::Request& req,
                                                     const std::string& served_model_name,
                                                     TranscriptionsRequest* out);

}  // namespace qs::server
