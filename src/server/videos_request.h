// server: POST /v1/videos and /v1/videos/sync bodies (vLLM-Omni's VideoGenerationRequest, read
// from its create_video form) parsed into a plain struct. vLLM-Omni takes multipart/form-data,
// the first frame of image-to-video as the `input_reference` file part; the same fields are
// also read from an application/x-www-form-urlencoded body or a JSON object (an image then comes
// as `image_reference`, {"image_url": "data:..."}). Schema mistakes (no prompt, a number that
// does not parse, a size or seconds not of their pattern, a body of another type) are 422s as
// FastAPI's validation gives them; values outside vLLM-Omni's Field bounds and the options this
// server does not implement are 400s naming the field. What depends on the pipeline (size
// multiples, frame counts, steps, the memory budget) is checked by the video backend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_request.h"

namespace httplib {
struct Request;
}  // namespace httplib

namespace qs::server {

struct VideosRequest {
  std::string prompt;
  std::optional<std::string> model;  // vLLM-Omni logs a mismatch and serves its model anyway
  std::string negative_prompt;
  // `size` "WxH" overrides width and height (vLLM-Omni's resolve_video_params).
  std::optional<int64_t> width, height;
  std::optional<int64_t> num_frames;  // explicit; else seconds x fps; else the model's default
  std::optional<int64_t> seconds;     // OpenAI's clip length, a positive whole number
  std::optional<int64_t> fps;         // 1 to 240 (the MP4 writer's range)
  std::optional<int64_t> num_inference_steps;  // 1 to 200
  std::optional<double> guidance_scale;        // 0 to 20: `transformer`'s (high noise)
  std::optional<double> guidance_scale_2;      // 0 to 20: `transformer_2`'s (low noise)
  std::optional<double> boundary_ratio;        // 0 to 1
  std::optional<double> flow_shift;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_sequence_length;
  // The first frame's encoded bytes (PNG, JPEG or WebP), from input_reference or
  // image_reference; `image_name` names it in messages.
  std::optional<std::string> image;
  std::string image_name;
  std::string user;
  std::vector<std::string> ignored_fields;  // fields that change nothing here, for a warning
};

// Parses the body of `req` (multipart form, urlencoded form or JSON object). On error returns
// it and leaves *out unspecified.
std::optional<ApiError> parse_videos_request(const httplib::Request& req, VideosRequest* out);

}  // namespace qs::server
