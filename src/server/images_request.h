// server: POST /v1/images/generations bodies (vLLM-Omni's ImageGenerationRequest, OpenAI's
// images API plus vLLM-Omni's diffusion extensions) parsed into a plain struct. Schema
// mistakes (missing or mistyped fields, n outside 1-10, an unknown response_format, a body
// that is not a JSON object) are 422s as FastAPI's validation gives them; a malformed size
// and the formats vLLM-Omni does not produce (url) are 400s. Checks that depend on the
// pipeline (size multiples, steps, sequence length) are the pipeline's (its validate()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_request.h"

namespace qs::server {

enum class ImageResponseFormat { kB64Json, kFile };

struct ImagesRequest {
  std::string prompt;
  std::optional<std::string> model;      // vLLM-Omni logs a mismatch and serves its model anyway
  int n = 1;                             // 1-10
  std::optional<int64_t> width, height;  // from size "WxH"; unset: the pipeline's default
  ImageResponseFormat response_format = ImageResponseFormat::kB64Json;
  std::string user;
  // vLLM-Omni's extensions; unset: the pipeline's defaults.
  std::string negative_prompt;
  std::optional<int64_t> num_inference_steps;
  std::optional<double> guidance_scale;
  std::optional<double> true_cfg_scale;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_sequence_length;
  std::vector<std::string> ignored_fields;  // keys neither OpenAI nor vLLM-Omni define
};

// OpenAI's status and type for a request that fails schema validation.
ApiError unprocessable_entity(std::string message, std::string param = "");

// "WxH" (vLLM-Omni's parse_size: exactly one 'x', two positive decimal integers) into
// *width, *height; else a 400 naming the size.
std::optional<ApiError> parse_image_size(const std::string& size, int64_t* width, int64_t* height);

std::optional<ApiError> parse_images_request(const std::string& body, ImagesRequest* out);

}  // namespace qs::server
