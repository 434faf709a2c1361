// server: parsing and validation of OpenAI-compatible request bodies (/v1/completions,
// /v1/chat/completions, /tokenize, /detokenize) into plain structs, with vLLM's rules and
// messages. Every mistake a client can make comes back as an ApiError (OpenAI's error
// envelope and vLLM's HTTP status), never an exception or a crash.
//
// Supported prompt forms (completions): a string, a list of strings, a list of token ids,
// or a list of token-id lists, as vLLM. Chat message content: a string or a list of content
// parts (chat_content.h): text, and images as data: or file:// URLs for a model with a vision
// tower, each image's placeholder expanded to its grid's tokens (vision/image_prompt.h).
// Fields vLLM does not know are ignored and reported in `ignored_fields` (vLLM logs them as a
// warning); fields vLLM knows but quantserve does not implement (logit_bias, tools,
// structured outputs, ...) are a 400 when set, rather than silently changing the output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audio/audio_prompt.h"
#include "engine/sampler.h"
#include "server/backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_prompt.h"
#include "vision/video_prompt.h"

namespace qs::server {

// JSON that keeps keys in insertion order, so bodies read like OpenAI's (id, object, ...).
using Json = nlohmann::ordered_json;

// An error for the client, rendered as {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::string param;  // the offending field; empty renders as null

  Json to_json() const;
};

ApiError bad_request(std::string message, std::string param = "");
ApiError model_not_found(const std::string& model);
ApiError unauthorized();
ApiError internal_server_error(std::string message);
ApiError service_unavailable(std::string message);
// A Status from below (engine, tokenizer) mapped to the status vLLM would send.
ApiError error_from_status(const Status& status);

// The serve flags that bound a chat request's images and clips (vLLM's names).
struct MediaOptions {
  int64_t max_images_per_prompt = 16;    // --limit-mm-per-prompt '{"image": N}'
  int64_t max_audios_per_prompt = 16;    // --limit-mm-per-prompt '{"audio": N}'
  int64_t max_videos_per_prompt = 16;    // --limit-mm-per-prompt '{"video": N}'
  std::string allowed_local_media_path;  // --allowed-local-media-path; empty: no file:// URLs
};

// What the server knows about the model it serves; all pointers outlive requests.
struct ModelInfo {
  std::string served_model_name;
  std::string root;  // the checkpoint directory (vLLM reports the model path here)
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  const tok::Tokenizer* tokenizer = nullptr;
  const tok::ChatTemplate* chat_template = nullptr;  // null: the model has none
  SamplingParams defaults;                           // generation_config.json over vLLM's
  int max_logprobs = 20;                             // vLLM's --max-logprobs default
  // The model's image placeholders and processor; null: it has no vision tower.
  const vision::ImagePromptConfig* images = nullptr;
  // Its sound-clip placeholders and feature extractor; null: it has no audio tower.
  const audio::AudioPromptConfig* audio = nullptr;
  // Its video placeholder and processor; null: it takes no videos.
  const vision::VideoPromptConfig* videos = nullptr;
  MediaOptions media;
};

enum class Endpoint { kCompletions, kChat };

// One prompt after tokenization.
struct Prompt {
  std::vector<int32_t> ids;  // images' placeholders expanded
  std::string text;          // the prompt as text (decoded for token-id prompts), for echo
  std::vector<models::MultimodalItem> mm_items;  // chat: one per image, at its run in `ids`
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<Prompt> prompts;  // chat: exactly one (the rendered conversation)
  int n = 1;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  bool echo = false;                    // completions only
  // Completions: set when the body set max_tokens. Chat: max_completion_tokens, else the
  // deprecated max_tokens. Unset: completions 16, chat what is left of the context.
  std::optional<int64_t> max_tokens;
  SamplingParams params;  // per choice; max_tokens filled in per prompt by the server
  std::string user;
  std::vector<std::string> ignored_fields;  // keys vLLM does not know, for a warning
};

// Parses and validates a generation body against the model. On error returns it and leaves
// *out unspecified. Tokenizes prompts, renders chat messages with the chat template, checks
// lengths against max_model_len and resolves max_tokens per prompt (see max_tokens_for).
std::optional<ApiError> parse_generation_request(Endpoint endpoint, const std::string& body,
                                                 const ModelInfo& model, GenerationRequest* out);

// max_tokens for one prompt, with vLLM's context checks: the prompt alone must leave room
// and prompt + max_tokens must fit in max_model_len.
std::optional<ApiError> max_tokens_for(const GenerationRequest& request, const Prompt& prompt,
                                       const ModelInfo& model, int32_t* max_tokens);

struct TokenizeRequest {
  std::vector<int32_t> ids;
  bool return_token_strs = false;
};
std::optional<ApiError> parse_tokenize_request(const std::string& body, const ModelInfo& model,
                                               TokenizeRequest* out);

struct DetokenizeRequest {
  std::vector<int32_t> ids;
};
std::optional<ApiError> parse_detokenize_request(const std::string& body, const ModelInfo& model,
                                                 DetokenizeRequest* out);

}  // namespace qs::server
