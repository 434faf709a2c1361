// server: OpenAI-compatible response bodies and stream chunks in the exact shapes vLLM sends
// (protocol.py: CompletionResponse, ChatCompletionResponse, *StreamResponse, UsageInfo,
// logprobs), and the server-sent-events framing: `data: <json>\n\n` per event, ending with
// `data: [DONE]\n\n`. Pure functions of their inputs, so the shapes are unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/backend.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace qs::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Set: prompt_tokens_details.cached_tokens is sent (vLLM's --enable-prompt-tokens-details).
  std::optional<int64_t> cached_tokens = std::nullopt;
};

// One finished choice of a non-streaming response.
struct Choice {
  int index = 0;
  std::string text;
  std::string finish_reason;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  std::vector<SampleLogprobs> logprobs;  // empty unless the request asked for them
};

// Fields every response and chunk of one request shares.
struct ResponseHeader {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// Serializes for the wire; invalid UTF-8 (a token that is part of a character) becomes
// U+FFFD instead of throwing.
std::string to_wire(const Json& j);

std::string sse_event(const Json& j);
std::string sse_done();

Json usage_json(const Usage& usage);

// vLLM's stop_reason: the stop string, else the stop token id, else null.
Json stop_reason_json(const std::optional<std::string>& stop, std::optional<int32_t> token);

// Completions logprobs: {tokens, token_logprobs, top_logprobs: [{token: logprob}],
// text_offset}; offsets count bytes from `text_offset0` (the text already sent).
Json completion_logprobs_json(const std::vector<SampleLogprobs>& logprobs,
                              const tok::Tokenizer& tokenizer, int64_t text_offset0);
// Chat logprobs: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
Json chat_logprobs_json(const std::vector<SampleLogprobs>& logprobs,
                        const tok::Tokenizer& tokenizer);

Json completion_response(const ResponseHeader& h, const std::vector<Choice>& choices,
                         const Usage& usage, bool want_logprobs, const tok::Tokenizer& tokenizer);
Json chat_response(const ResponseHeader& h, const std::vector<Choice>& choices, const Usage& usage,
                   bool want_logprobs, const tok::Tokenizer& tokenizer);

// One streamed update of choice `index`. finish_reason empty: not finished (null).
// `logprobs` is null when the request did not ask for them.
Json completion_chunk(const ResponseHeader& h, int index, const std::string& text,
                      const std::string& finish_reason, const Json& stop_reason,
                      const Json& logprobs);
// `role` is set on the first chunk of each choice ("assistant"), else left out of the delta.
Json chat_chunk(const ResponseHeader& h, int index, const std::optional<std::string>& role,
                const std::optional<std::string>& content, const std::string& finish_reason,
                const Json& stop_reason, const Json& logprobs);
// The final usage-only chunk of include_usage: empty choices.
Json usage_chunk(Endpoint endpoint, const ResponseHeader& h, const Usage& usage);

// GET /v1/models for the one served model.
Json models_response(const ModelInfo& model, int64_t created);
// RFC 4648 base64 with padding (OpenAI's b64_json).
std::string base64_encode(const std::string& bytes);
// POST /v1/images/generations with response_format b64_json: {created, data: [{b64_json,
// url: null, revised_prompt: null}]}, one entry per PNG, as vLLM-Omni's ImageGenerationResponse.
Json images_response(int64_t created, const std::vector<std::string>& pngs);

// POST /tokenize.
Json tokenize_response(const std::vector<int32_t>& ids, bool return_token_strs,
                       const ModelInfo& model);

}  // namespace qs::server
