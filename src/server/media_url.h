// server: the bytes behind a content part's image URL, as vLLM's MediaConnector reads them:
// `data:<type>;base64,<data>` URLs decoded here (strict RFC 4648, as pybase64's validate=True),
// `file://` URLs only under the --allowed-local-media-path directory, and http(s) refused,
// since this server fetches nothing. Every refusal is a 400 naming the part.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai_request.h"

namespace qs::server {

// A data URL's payload may not decode past this (the image decoders then check the pixels).
inline constexpr int64_t kMaxMediaBytes = 64ll << 20;

// Standard base64 with padding; nullopt for any other byte, bad padding or a length that is not
// a multiple of 4.
std::optional<std::string> base64_decode(std::string_view text);

// The media at `url` into *bytes. `allowed_local_dir` empty: file:// URLs are refused.
std::optional<ApiError> load_media_url(const std::string& url, const std::string& allowed_local_dir,
                                       std::string* bytes);

}  // namespace qs::server
