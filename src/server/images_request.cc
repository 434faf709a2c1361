// server: /v1/images/generations request parsing (see images_request.h). Field names,
// ranges and messages follow vLLM-Omni's protocol/images.py and serving code.
#include "server/images_request.h"

#include <set>

#include "server/json_fields.h"

namespace qs::server {
namespace {

// pydantic's Field(ge=1, le=10) on n.
constexpr int kMaxImages = 10;
// Sides past this cannot be a real request (the pipeline's own limit is far lower); it
// keeps the arithmetic on them in range.
constexpr int64_t kMaxSizeDigits = 9;

// OpenAI's images fields that change nothing here (DALL-E / gpt-image styling); vLLM-Omni
// accepts and ignores them too.
const std::set<std::string>& accepted_image_fields() {
  static const std::set<std::string> kFields = {"prompt",
                                                "model",
                                                "n",
                                                "size",
                                                "response_format",
                                                "user",
                                                "negative_prompt",
                                                "num_inference_steps",
                                                "guidance_scale",
                                                "true_cfg_scale",
                                                "seed",
                                                "max_sequence_length",
                                                "quality",
                                                "style",
                                                "background",
                                                "moderation",
                                                "output_compression",
                                                "output_format",
                                                "stream",
                                                "partial_images"};
  return kFields;
}

// A 400 from the shared readers becomes the 422 schema validation gives.
std::optional<ApiError> as_422(std::optional<ApiError> e) {
  if (e) e = unprocessable_entity(e->message, e->param);
  return e;
}

std::optional<ApiError> read_double(const Json& body, const std::string& key,
                                    std::optional<double>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return unprocessable_entity("'" + key + "' must be a number.", key);
  *out = it->get<double>();
  return std::nullopt;
}

std::optional<ApiError> read_opt_int(const Json& body, const std::string& key,
                                     std::optional<int64_t>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t v = 0;
  if (auto e = as_422(as_int(*it, key, &v))) return e;
  *out = v;
  return std::nullopt;
}

// One side of a size: decimal digits only, at most kMaxSizeDigits of them.
bool parse_side(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > kMaxSizeDigits) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

ApiError unprocessable_entity(std::string message, std::string param) {
  return ApiError{422, "UnprocessableEntityError", std::move(message), std::move(param)};
}

std::optional<ApiError> parse_image_size(const std::string& size, int64_t* width, int64_t* height) {
  const size_t x = size.find('x');
  int64_t w = 0, h = 0;
  if (x == std::string::npos || size.find('x', x + 1) != std::string::npos ||
      !parse_side(size.substr(0, x), &w) || !parse_side(size.substr(x + 1), &h)) {
    return bad_request(
        "Invalid size format: '" + size + "'. Expected format: 'WIDTHxHEIGHT' (e.g., '1024x1024').",
        "size");
  }
  if (w <= 0 || h <= 0) {
    return bad_request("Width and height must be positive integers, got: " + size + ".", "size");
  }
  *width = w;
  *height = h;
  return std::nullopt;
}

std::optional<ApiError> parse_images_request(const std::string& body_text, ImagesRequest* r) {
  Json body;
  if (auto e = as_422(parse_body(body_text, &body))) return e;
  *r = ImagesRequest{};

  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) {
    return unprocessable_entity("'prompt' is required.", "prompt");
  }
  if (!prompt->is_string()) return unprocessable_entity("'prompt' must be a string.", "prompt");
  r->prompt = prompt->get<std::string>();

  std::string model;
  if (auto e = as_422(read_string(body, "model", &model))) return e;
  if (body.contains("model") && !body["model"].is_null()) r->model = model;

  int64_t n = 1;
  if (auto e = as_422(read_int(body, "n", &n))) return e;
  if (n < 1 || n > kMaxImages) {
    return unprocessable_entity("'n' must be between 1 and " + std::to_string(kMaxImages) +
                                    ", got " + std::to_string(n) + ".",
                                "n");
  }
  r->n = static_cast<int>(n);

  std::string size;
  if (auto e = as_422(read_string(body, "size", &size))) return e;
  if (body.contains("size") && !body["size"].is_null()) {
    int64_t w = 0, h = 0;
    if (auto e = parse_image_size(size, &w, &h)) return e;
    r->width = w;
    r->height = h;
  }

  std::string format = "b64_json";
  if (auto e = as_422(read_string(body, "response_format", &format))) return e;
  if (format == "b64_json") {
    r->response_format = ImageResponseFormat::kB64Json;
  } else if (format == "file") {
    r->response_format = ImageResponseFormat::kFile;
  } else if (format == "url") {
    return bad_request("response_format 'url' is not supported; use 'b64_json' or 'file'.",
                       "response_format");
  } else {
    return unprocessable_entity(
        "'response_format' must be 'b64_json', 'url' or 'file', got '" + format + "'.",
        "response_format");
  }
  if (r->response_format == ImageResponseFormat::kFile && r->n != 1) {
    return bad_request("response_format 'file' returns one PNG; n must be 1.", "n");
  }
  std::string output_format = "png";
  if (auto e = as_422(read_string(body, "output_format", &output_format))) return e;
  if (output_format != "png") {
    return bad_request("output_format '" + output_format + "' is not supported; images are PNG.",
                       "output_format");
  }
  bool stream = false;
  if (auto e = as_422(read_bool(body, "stream", &stream))) return e;
  if (stream) return bad_request("Streaming image generation is not supported.", "stream");

  if (auto e = as_422(read_string(body, "user", &r->user))) return e;
  if (auto e = as_422(read_string(body, "negative_prompt", &r->negative_prompt))) return e;
  if (auto e = read_opt_int(body, "num_inference_steps", &r->num_inference_steps)) return e;
  if (auto e = read_opt_int(body, "max_sequence_length", &r->max_sequence_length)) return e;
  if (auto e = read_double(body, "guidance_scale", &r->guidance_scale)) return e;
  if (auto e = read_double(body, "true_cfg_scale", &r->true_cfg_scale)) return e;
  std::optional<int64_t> seed;
  if (auto e = read_opt_int(body, "seed", &seed)) return e;
  if (seed) {
    if (*seed < 0) return unprocessable_entity("'seed' must be non-negative.", "seed");
    r->seed = static_cast<uint64_t>(*seed);
  }
  for (const auto& [key, value] : body.items()) {
    if (!accepted_image_fields().count(key)) r->ignored_fields.push_back(key);
  }
  return std::nullopt;
}

}  // namespace qs::server
