// server: image URLs of content parts (see media_url.h).
#include "server/media_url.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>

namespace qs::server {
namespace {

namespace fs = std::filesystem;

constexpr const char* kParam = "messages";

std::array<int8_t, 256> base64_table() {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.size() >= prefix.size() && std::string_view(s).substr(0, prefix.size()) == prefix;
}

std::optional<ApiError> load_data_url(const std::string& url, std::string* bytes) {
  // data:[<media type>][;base64],<data>; vLLM reads base64 only.
  const size_t comma = url.find(',');
  if (comma == std::string::npos) {
    return bad_request("A data URL needs a ',' before its data.", kParam);
  }
  const std::string header = url.substr(5, comma - 5);
  const size_t semi = header.rfind(';');
  if (semi == std::string::npos || header.substr(semi + 1) != "base64") {
    return bad_request("Only base64 data URLs are supported (data:image/png;base64,...).", kParam);
  }
  const std::string_view data = std::string_view(url).substr(comma + 1);
  if (static_cast<int64_t>(data.size()) / 4 * 3 > kMaxMediaBytes) {
    return bad_request("The image in the data URL is larger than " +
                           std::to_string(kMaxMediaBytes >> 20) + " MiB.",
                       kParam);
  }
  std::optional<std::string> decoded = base64_decode(data);
  if (!decoded) return bad_request("The data URL's payload is not valid base64.", kParam);
  *bytes = std::move(*decoded);
  return std::nullopt;
}

// vLLM's file:// rules: a path under the allowed directory once both are resolved, so neither
// "..", nor a symlink out of it, reaches another file.
std::optional<ApiError> load_file_url(const std::string& url, const std::string& allowed_local_dir,
                                      std::string* bytes) {
  if (allowed_local_dir.empty()) {
    return bad_request("Cannot load local files without `--allowed-local-media-path`.", kParam);
  }
  const std::string path = url.substr(7);
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::path(path), ec);
  const fs::path root = fs::weakly_canonical(fs::path(allowed_local_dir), ec);
  const auto mismatch =
      std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end()).first;
  if (ec || path.empty() || path[0] != '/' || mismatch != root.end()) {
    return bad_request("The file path " + path +
                           " must be a subpath of `--allowed-local-media-path` " +
                           allowed_local_dir + ".",
                       kParam);
  }
  const uintmax_t size = fs::file_size(resolved, ec);
  if (ec || !fs::is_regular_file(resolved, ec)) {
    return bad_request("Cannot read the file " + path + ".", kParam);
  }
  if (size > static_cast<uintmax_t>(kMaxMediaBytes)) {
    return bad_request(
        "The file " + path + " is larger than " + std::to_string(kMaxMediaBytes >> 20) + " MiB.",
        kParam);
  }
  std::ifstream in(resolved, std::ios::binary);
  bytes->assign(static_cast<size_t>(size), '\0');
  if (!in.read(bytes->data(), static_cast<std::streamsize>(size))) {
    return bad_request("Cannot read the file " + path + ".", kParam);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  static const std::array<int8_t, 256> kTable = base64_table();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const uint8_t c = static_cast<uint8_t>(text[i + j]);
      if (c == '=' && last && j >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad > 0 || kTable[c] < 0) return std::nullopt;  // '=' only at the very end
      v = (v << 6) | static_cast<uint32_t>(kTable[c]);
    }
    out.push_back(static_cast<char>((v >> 16) & 0xff));
    if (pad < 2) out.push_back(static_cast<char>((v >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return out;
}

std::optional<ApiError> load_media_url(const std::string& url, const std::string& allowed_local_dir,
                                       std::string* bytes) {
  if (starts_with(url, "data:")) return load_data_url(url, bytes);
  if (starts_with(url, "file://")) return load_file_url(url, allowed_local_dir, bytes);
  if (starts_with(url, "http://") || starts_with(url, "https://")) {
    return bad_request(
        "quantserve does not fetch remote media: send the image as a data URL "
        "(data:image/png;base64,...) or, with --allowed-local-media-path, a file:// URL.",
        kParam);
  }
  return bad_request("Unsupported image URL: expected a data: or file:// URL.", kParam);
}

}  // namespace qs::server
