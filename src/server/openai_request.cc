// server: request parsing and validation (see openai_request.h). Field names, defaults and
// error messages follow vLLM's protocol.py and serving_engine.py so that clients written
// against vLLM see the same behaviour.
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "server/chat_content.h"
#include "server/chat_media.h"
#include "server/json_fields.h"

namespace qs::server {

Json ApiError::to_json() const {
  Json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? Json(nullptr) : Json(param)},
            {"code", http_status}};
  return {{"error", e}};
}

ApiError bad_request(std::string message, std::string param) {
  return ApiError{400, "BadRequestError", std::move(message), std::move(param)};
}
ApiError model_not_found(const std::string& model) {
  return ApiError{404, "NotFoundError", "The model `" + model + "` does not exist.", "model"};
}
ApiError unauthorized() {
  return ApiError{401, "AuthenticationError", "Unauthorized", ""};
}
ApiError internal_server_error(std::string message) {
  return ApiError{500, "InternalServerError", std::move(message), ""};
}
ApiError service_unavailable(std::string message) {
  return ApiError{503, "ServiceUnavailableError", std::move(message), ""};
}

ApiError error_from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      return bad_request(status.message());
    case StatusCode::kUnavailable:
      return service_unavailable(status.message());
    default:
      return internal_server_error(status.message());
  }
}

namespace {

// Fields of vLLM's CompletionRequest / ChatCompletionRequest that quantserve does not
// implement. Sent with a non-default value they are a 400; leaving them out (or null, or
// the neutral value) is fine.
const std::set<std::string>& unsupported_fields() {
  static const std::set<std::string> kFields = {"logit_bias",
                                                "prompt_logprobs",
                                                "allowed_token_ids",
                                                "bad_words",
                                                "suffix",
                                                "truncate_prompt_tokens",
                                                "guided_json",
                                                "guided_regex",
                                                "guided_choice",
                                                "guided_grammar",
                                                "structured_outputs",
                                                "return_tokens_as_token_ids",
                                                "chat_template",
                                                "tools",
                                                "use_beam_search",
                                                "logits_processors",
                                                "documents",
                                                "functions",
                                                "function_call",
                                                "prompt_embeds",
                                                "kv_transfer_params",
                                                "vllm_xargs",
                                                "return_token_ids",
                                                "length_penalty",
                                                "guided_decoding_backend"};
  return kFields;
}

// Fields vLLM accepts that have no effect here, so they are neither errors nor warnings.
const std::set<std::string>& accepted_fields() {
  static const std::set<std::string> kFields = {"model",
                                                "prompt",
                                                "messages",
                                                "n",
                                                "stream",
                                                "stream_options",
                                                "stop",
                                                "stop_token_ids",
                                                "seed",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "min_p",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "repetition_penalty",
                                                "max_tokens",
                                                "max_completion_tokens",
                                                "min_tokens",
                                                "logprobs",
                                                "top_logprobs",
                                                "ignore_eos",
                                                "echo",
                                                "skip_special_tokens",
                                                "include_stop_str_in_output",
                                                "user",
                                                "add_special_tokens",
                                                "add_generation_prompt",
                                                "continue_final_message",
                                                "chat_template_kwargs",
                                                "request_id",
                                                "priority",
                                                "cache_salt",
                                                "spaces_between_special_tokens",
                                                "response_format",
                                                "tool_choice",
                                                "parallel_tool_calls",
                                                "guided_whitespace_pattern",
                                                "metadata",
                                                "store",
                                                "service_tier",
                                                "reasoning_effort",
                                                "include_reasoning"};
  return kFields;
}

bool is_neutral(const std::string& key, const Json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();  // use_beam_search: false etc.
  if ((v.is_object() || v.is_array()) && v.empty()) return true;
  (void)key;
  return false;
}

std::optional<ApiError> check_model(const Json& body, const ModelInfo& model, std::string* name) {
  *name = model.served_model_name;
  if (auto e = read_string(body, "model", name)) return e;
  // vLLM serves the request with its only model when the field is left out.
  if (*name != model.served_model_name) return model_not_found(*name);
  return std::nullopt;
}

std::optional<ApiError> check_token_ids(const Json& v, const std::string& key,
                                        const ModelInfo& model, std::vector<int32_t>* out) {
  out->clear();
  for (const auto& t : v) {
    int64_t id = 0;
    if (auto e = as_int(t, key, &id)) return type_error(key, "a list of token ids");
    if (id < 0 || id >= model.vocab_size) {
      return bad_request("Token id " + std::to_string(id) + " is out of vocabulary (size " +
                             std::to_string(model.vocab_size) + ").",
                         key);
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// A list whose every element is a JSON integer (a token-id prompt).
bool is_int_list(const Json& v) {
  return v.is_array() && !v.empty() &&
         std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_number_integer(); });
}

std::optional<ApiError> parse_prompts(const Json& body, const ModelInfo& model,
                                      std::vector<Prompt>* prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad_request("'prompt' is required.", "prompt");
  bool add_special = true;  // vLLM's default for completions
  if (auto e = read_bool(body, "add_special_tokens", &add_special)) return e;
  auto from_text = [&](const std::string& text) {
    Prompt p;
    p.text = text;
    p.ids = model.tokenizer->encode(text, add_special);
    prompts->push_back(std::move(p));
  };
  auto from_ids = [&](const Json& v) -> std::optional<ApiError> {
    Prompt p;
    if (auto e = check_token_ids(v, "prompt", model, &p.ids)) return e;
    p.text = model.tokenizer->decode(p.ids, /*skip_special=*/false);
    prompts->push_back(std::move(p));
    return std::nullopt;
  };
  const Json& v = *it;
  if (v.is_string()) {
    from_text(v.get<std::string>());
  } else if (is_int_list(v)) {
    if (auto e = from_ids(v)) return e;
  } else if (v.is_array() && !v.empty()) {
    for (const auto& p : v) {
      if (p.is_string()) {
        from_text(p.get<std::string>());
      } else if (is_int_list(p)) {
        if (auto e = from_ids(p)) return e;
      } else {
        return type_error("prompt",
                          "a string, a list of strings, a list of token ids or a list of "
                          "token-id lists");
      }
    }
  } else {
    return type_error("prompt",
                      "a non-empty string, list of strings, list of token ids or list of "
                      "token-id lists");
  }
  for (const Prompt& p : *prompts) {
    if (p.ids.empty()) return bad_request("The prompt cannot be empty.", "prompt");
  }
  return std::nullopt;
}

// Renders `messages` with the chat template, tokenizes the result and widens its media
// placeholders.
std::optional<ApiError> render_chat(const Json& body, const ModelInfo& model, Prompt* prompt) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return bad_request("'messages' must be a non-empty list of messages.", "messages");
  }
  const bool openai_format =
      model.chat_template != nullptr && template_iterates_content(model.chat_template->source());
  ChatMessages chat;
  if (auto e = parse_chat_messages(
          *it, openai_format,
          media_placeholders(*model.tokenizer, {model.images, model.audio, model.videos}), &chat))
    return e;
  if (model.chat_template == nullptr) {
    return bad_request(
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.");
  }
  bool add_generation_prompt = true;
  bool continue_final = false;
  bool add_special = false;  // vLLM's default for chat: the template writes BOS itself
  if (auto e = read_bool(body, "add_generation_prompt", &add_generation_prompt)) return e;
  if (auto e = read_bool(body, "continue_final_message", &continue_final)) return e;
  if (auto e = read_bool(body, "add_special_tokens", &add_special)) return e;
  if (continue_final && add_generation_prompt) {
    return bad_request(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  Json kwargs = Json::object();
  if (auto k = body.find("chat_template_kwargs"); k != body.end() && !k->is_null()) {
    if (!k->is_object()) return type_error("chat_template_kwargs", "an object");
    kwargs = *k;
  }
  MediaRequestOptions media_options;
  if (auto e = read_mm_processor_kwargs(body, &media_options)) return e;
  std::vector<models::PlaceholderItem> media;
  if (auto e = prepare_chat_media(chat, model, media_options, &media)) return e;
  Result<std::string> text =
      model.chat_template->render(chat.messages, add_generation_prompt, kwargs);
  if (!text.ok()) return bad_request("Chat template error: " + text.status().message());
  prompt->text = std::move(*text);
  if (continue_final) {
    // The final assistant message is left open: drop what the template wrote after it.
    const std::string& last = chat.final_text;
    const size_t pos = last.empty() ? std::string::npos : prompt->text.rfind(last);
    if (pos != std::string::npos) prompt->text.resize(pos + last.size());
  }
  prompt->ids = model.tokenizer->encode(prompt->text, add_special);
  if (prompt->ids.empty()) return bad_request("The chat template rendered an empty prompt.");
  return expand_chat_media(model, std::move(media), prompt);
}

std::optional<ApiError> parse_stop(const Json& body, SamplingParams* p) {
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
    p->stop.clear();
    if (it->is_string()) {
      p->stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) return type_error("stop", "a string or a list of strings");
        p->stop.push_back(s.get<std::string>());
      }
    } else {
      return type_error("stop", "a string or a list of strings");
    }
  }
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return type_error("stop_token_ids", "a list of token ids");
    p->stop_token_ids.clear();
    for (const auto& t : *it) {
      int64_t id = 0;
      if (as_int(t, "stop_token_ids", &id) || id < INT32_MIN || id > INT32_MAX)
        return type_error("stop_token_ids", "a list of token ids");
      p->stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const Json& body, Endpoint endpoint, const ModelInfo& model,
                                       GenerationRequest* r) {
  SamplingParams& p = r->params;
  for (auto [key, field] : {std::pair<const char*, float*>{"temperature", &p.temperature},
                            {"top_p", &p.top_p},
                            {"min_p", &p.min_p},
                            {"presence_penalty", &p.presence_penalty},
                            {"frequency_penalty", &p.frequency_penalty},
                            {"repetition_penalty", &p.repetition_penalty}}) {
    if (auto e = read_float(body, key, field)) return e;
  }
  int64_t top_k = p.top_k;
  if (auto e = read_int(body, "top_k", &top_k)) return e;
  if (top_k > INT32_MAX || top_k < INT32_MIN)
    return bad_request("'top_k' is out of range.", "top_k");
  p.top_k = static_cast<int32_t>(top_k);
  int64_t seed = 0;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (auto e = read_int(body, "seed", &seed)) return e;
    p.seed = static_cast<uint64_t>(seed);  // the int64 range maps onto the RNG's 64 bits
  }
  if (auto e = parse_stop(body, &p)) return e;
  if (auto e = read_bool(body, "ignore_eos", &p.ignore_eos)) return e;
  if (auto e = read_bool(body, "skip_special_tokens", &p.skip_special_tokens)) return e;
  if (auto e = read_bool(body, "include_stop_str_in_output", &p.include_stop_str_in_output))
    return e;
  bool spaces = true;
  if (auto e = read_bool(body, "spaces_between_special_tokens", &spaces)) return e;
  if (!spaces) {
    return bad_request("spaces_between_special_tokens=false is not supported.",
                       "spaces_between_special_tokens");
  }

  int64_t v = 0;
  const char* max_key = endpoint == Endpoint::kChat && body.contains("max_completion_tokens") &&
                                !body["max_completion_tokens"].is_null()
                            ? "max_completion_tokens"
                            : "max_tokens";
  if (body.contains(max_key) && !body[max_key].is_null()) {
    if (auto e = read_int(body, max_key, &v)) return e;
    if (v < 1) {
      return bad_request("max_tokens must be at least 1, got " + std::to_string(v) + ".", max_key);
    }
    r->max_tokens = v;
  }
  int64_t min_tokens = 0;
  if (auto e = read_int(body, "min_tokens", &min_tokens)) return e;
  if (min_tokens < 0 || min_tokens > INT32_MAX) {
    return bad_request(
        "min_tokens must be greater than or equal to 0, got " + std::to_string(min_tokens) + ".",
        "min_tokens");
  }
  r->params.min_tokens = static_cast<int32_t>(min_tokens);

  if (endpoint == Endpoint::kCompletions) {
    if (body.contains("logprobs") && !body["logprobs"].is_null()) {
      if (auto e = read_int(body, "logprobs", &v)) return e;
      if (v < 0) return bad_request("logprobs must be non-negative.", "logprobs");
      r->params.logprobs = static_cast<int32_t>(std::min<int64_t>(v, INT32_MAX));
    }
  } else {
    bool logprobs = false;
    if (auto e = read_bool(body, "logprobs", &logprobs)) return e;
    int64_t top = 0;
    const bool has_top = body.contains("top_logprobs") && !body["top_logprobs"].is_null();
    if (auto e = read_int(body, "top_logprobs", &top)) return e;
    if (has_top && !logprobs) {
      return bad_request("when using `top_logprobs`, `logprobs` must be set to true.",
                         "top_logprobs");
    }
    if (top < 0) return bad_request("`top_logprobs` must be a positive value.", "top_logprobs");
    if (logprobs) r->params.logprobs = static_cast<int32_t>(std::min<int64_t>(top, INT32_MAX));
  }
  if (r->params.logprobs && *r->params.logprobs > model.max_logprobs) {
    return bad_request(
        "Requested sample logprobs of " + std::to_string(*r->params.logprobs) +
            ", which is greater than max allowed: " + std::to_string(model.max_logprobs),
        endpoint == Endpoint::kChat ? "top_logprobs" : "logprobs");
  }
  // max_tokens (and min_tokens against it) are checked per prompt (max_tokens_for);
  // validate() needs legal placeholders until then.
  SamplingParams check = p;
  check.max_tokens = 1;
  check.min_tokens = 0;
  Status s = check.validate(model.vocab_size);
  if (!s.ok()) return bad_request(s.message());
  return std::nullopt;
}

std::optional<ApiError> check_fields(const Json& body, GenerationRequest* r) {
  for (const auto& [key, value] : body.items()) {
    if (unsupported_fields().count(key)) {
      if (!is_neutral(key, value))
        return bad_request("'" + key + "' is not supported by quantserve.", key);
    } else if (!accepted_fields().count(key)) {
      r->ignored_fields.push_back(key);
    }
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    const bool text = it->is_object() && it->contains("type") && (*it)["type"].is_string() &&
                      (*it)["type"].get<std::string>() == "text";
    if (!text) {
      return bad_request("response_format other than {\"type\": \"text\"} is not supported.",
                         "response_format");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_generation_request(Endpoint endpoint, const std::string& body_text,
                                                 const ModelInfo& model, GenerationRequest* r) {
  Json body;
  if (auto e = parse_body(body_text, &body)) return e;
  *r = GenerationRequest();
  r->endpoint = endpoint;
  r->params = model.defaults;
  if (auto e = check_fields(body, r)) return e;
  if (auto e = check_model(body, model, &r->model)) return e;

  int64_t n = 1;
  if (auto e = read_int(body, "n", &n)) return e;
  // vLLM requires n >= 1; the upper bound is quantserve's, to keep one request's memory sane.
  constexpr int64_t kMaxN = 128;
  if (n < 1 || n > kMaxN) {
    return bad_request(
        "n must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(n) + ".", "n");
  }
  r->n = static_cast<int>(n);
  if (auto e = read_bool(body, "stream", &r->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return type_error("stream_options", "an object");
    if (!r->stream) {
      return bad_request("Stream options can only be defined when `stream=True`.",
                         "stream_options");
    }
    if (auto e = read_bool(*it, "include_usage", &r->include_usage)) return e;
    if (auto e = read_bool(*it, "continuous_usage_stats", &r->continuous_usage_stats)) return e;
  }
  if (auto e = read_string(body, "user", &r->user)) return e;
  if (auto e = parse_sampling(body, endpoint, model, r)) return e;

  if (endpoint == Endpoint::kCompletions) {
    if (auto e = read_bool(body, "echo", &r->echo)) return e;
    if (body.contains("messages"))
      return bad_request("Use 'prompt' with /v1/completions.", "messages");
    if (auto e = parse_prompts(body, model, &r->prompts)) return e;
  } else {
    if (body.contains("prompt"))
      return bad_request("Use 'messages' with /v1/chat/completions.", "prompt");
    bool echo = false;
    if (auto e = read_bool(body, "echo", &echo)) return e;
    if (echo) return bad_request("'echo' is not supported for chat completions.", "echo");
    Prompt p;
    if (auto e = render_chat(body, model, &p)) return e;
    r->prompts.push_back(std::move(p));
  }
  for (const Prompt& p : r->prompts) {
    int32_t max_tokens = 0;
    if (auto e = max_tokens_for(*r, p, model, &max_tokens)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> max_tokens_for(const GenerationRequest& r, const Prompt& prompt,
                                       const ModelInfo& model, int32_t* max_tokens) {
  const int64_t n_prompt = static_cast<int64_t>(prompt.ids.size());
  const int64_t room = model.max_model_len - n_prompt;
  const char* key = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (room < 1) {
    return bad_request("This model's maximum context length is " +
                           std::to_string(model.max_model_len) +
                           " tokens. However, your request has " + std::to_string(n_prompt) +
                           " input tokens. Please reduce the length of the input messages.",
                       key);
  }
  int64_t want = r.max_tokens.value_or(r.endpoint == Endpoint::kChat ? room : 16);
  if (want > room) {
    return bad_request(
        "'max_tokens' or 'max_completion_tokens' is too large: " + std::to_string(want) +
            ". This model's maximum context length is " + std::to_string(model.max_model_len) +
            " tokens and your request has " + std::to_string(n_prompt) + " input tokens (" +
            std::to_string(want) + " > " + std::to_string(model.max_model_len) + " - " +
            std::to_string(n_prompt) + ").",
        "max_tokens");
  }
  if (r.params.min_tokens > want) {
    return bad_request(
        "min_tokens must be less than or equal to max_tokens=" + std::to_string(want) + ", got " +
            std::to_string(r.params.min_tokens) + ".",
        "min_tokens");
  }
  *max_tokens = static_cast<int32_t>(want);
  return std::nullopt;
}

std::optional<ApiError> parse_tokenize_request(const std::string& body_text, const ModelInfo& model,
                                               TokenizeRequest* out) {
  Json body;
  if (auto e = parse_body(body_text, &body)) return e;
  std::string name;
  if (auto e = check_model(body, model, &name)) return e;
  if (auto e = read_bool(body, "return_token_strs", &out->return_token_strs)) return e;
  if (body.contains("messages")) {
    Prompt p;
    if (auto e = render_chat(body, model, &p)) return e;
    out->ids = std::move(p.ids);
    return std::nullopt;
  }
  std::string prompt;
  if (!body.contains("prompt")) return bad_request("'prompt' or 'messages' is required.", "prompt");
  if (auto e = read_string(body, "prompt", &prompt)) return e;
  bool add_special = true;
  if (auto e = read_bool(body, "add_special_tokens", &add_special)) return e;
  out->ids = model.tokenizer->encode(prompt, add_special);
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize_request(const std::string& body_text,
                                                 const ModelInfo& model, DetokenizeRequest* out) {
  Json body;
  if (auto e = parse_body(body_text, &body)) return e;
  std::string name;
  if (auto e = check_model(body, model, &name)) return e;
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return type_error("tokens", "a list of token ids");
  return check_token_ids(*it, "tokens", model, &out->ids);
}

}  // namespace qs::server
