// server: response and chunk builders (see openai_response.h).
#include "server/openai_response.h"

namespace qs::server {

std::string to_wire(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sse_event(const Json& j) {
  return "data: " + to_wire(j) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

Json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"completion_tokens", u.completion_tokens},
          {"prompt_tokens_details",
           u.cached_tokens ? Json{{"cached_tokens", *u.cached_tokens}} : Json(nullptr)}};
}

Json stop_reason_json(const std::optional<std::string>& stop, std::optional<int32_t> token) {
  if (stop) return *stop;
  if (token) return *token;
  return nullptr;
}

Json completion_logprobs_json(const std::vector<SampleLogprobs>& logprobs,
                              const tok::Tokenizer& tokenizer, int64_t text_offset0) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  int64_t offset = text_offset0;
  for (const SampleLogprobs& lp : logprobs) {
    const std::string piece = tokenizer.token_bytes(lp.sampled.token);
    tokens.push_back(piece);
    token_logprobs.push_back(lp.sampled.logprob);
    Json alternatives = Json::object();
    for (const engine::TokenLogprob& t : lp.top)
      alternatives[tokenizer.token_bytes(t.token)] = t.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(piece.size());
  }
  return {{"text_offset", offsets},
          {"token_logprobs", token_logprobs},
          {"tokens", tokens},
          {"top_logprobs", top}};
}

namespace {

Json byte_list(const std::string& s) {
  Json bytes = Json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json logprob_entry(int32_t id, float logprob, const tok::Tokenizer& tokenizer) {
  const std::string piece = tokenizer.token_bytes(id);
  return {{"token", piece}, {"logprob", logprob}, {"bytes", byte_list(piece)}};
}

Json header_json(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

Json chat_logprobs_json(const std::vector<SampleLogprobs>& logprobs,
                        const tok::Tokenizer& tokenizer) {
  Json content = Json::array();
  for (const SampleLogprobs& lp : logprobs) {
    Json entry = logprob_entry(lp.sampled.token, lp.sampled.logprob, tokenizer);
    Json top = Json::array();
    for (const engine::TokenLogprob& t : lp.top)
      top.push_back(logprob_entry(t.token, t.logprob, tokenizer));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", content}};
}

Json completion_response(const ResponseHeader& h, const std::vector<Choice>& choices,
                         const Usage& usage, bool want_logprobs, const tok::Tokenizer& tokenizer) {
  Json out = header_json(h, "text_completion");
  Json list = Json::array();
  for (const Choice& c : choices) {
    list.push_back({{"index", c.index},
                    {"text", c.text},
                    {"logprobs", want_logprobs ? completion_logprobs_json(c.logprobs, tokenizer, 0)
                                               : Json(nullptr)},
                    {"finish_reason", c.finish_reason},
                    {"stop_reason", stop_reason_json(c.stop_string, c.stop_token_id)}});
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

Json chat_response(const ResponseHeader& h, const std::vector<Choice>& choices, const Usage& usage,
                   bool want_logprobs, const tok::Tokenizer& tokenizer) {
  Json out = header_json(h, "chat.completion");
  Json list = Json::array();
  for (const Choice& c : choices) {
    Json message = {{"role", "assistant"}, {"content", c.text}, {"tool_calls", Json::array()}};
    list.push_back(
        {{"index", c.index},
         {"message", std::move(message)},
         {"logprobs", want_logprobs ? chat_logprobs_json(c.logprobs, tokenizer) : Json(nullptr)},
         {"finish_reason", c.finish_reason},
         {"stop_reason", stop_reason_json(c.stop_string, c.stop_token_id)}});
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

Json completion_chunk(const ResponseHeader& h, int index, const std::string& text,
                      const std::string& finish_reason, const Json& stop_reason,
                      const Json& logprobs) {
  Json out = header_json(h, "text_completion");
  out["choices"] =
      Json::array({{{"index", index},
                    {"text", text},
                    {"logprobs", logprobs},
                    {"finish_reason", finish_reason.empty() ? Json(nullptr) : Json(finish_reason)},
                    {"stop_reason", stop_reason}}});
  return out;
}

Json chat_chunk(const ResponseHeader& h, int index, const std::optional<std::string>& role,
                const std::optional<std::string>& content, const std::string& finish_reason,
                const Json& stop_reason, const Json& logprobs) {
  Json out = header_json(h, "chat.completion.chunk");
  Json delta = Json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  out["choices"] =
      Json::array({{{"index", index},
                    {"delta", std::move(delta)},
                    {"logprobs", logprobs},
                    {"finish_reason", finish_reason.empty() ? Json(nullptr) : Json(finish_reason)},
                    {"stop_reason", stop_reason}}});
  return out;
}

Json usage_chunk(Endpoint endpoint, const ResponseHeader& h, const Usage& usage) {
  Json out =
      header_json(h, endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

Json models_response(const ModelInfo& model, int64_t created) {
  Json permission = {{"id", "modelperm-" + model.served_model_name},
                     {"object", "model_permission"},
                     {"created", created},
                     {"allow_create_engine", false},
                     {"allow_sampling", true},
                     {"allow_logprobs", true},
                     {"allow_search_indices", false},
                     {"allow_view", true},
                     {"allow_fine_tuning", false},
                     {"organization", "*"},
                     {"group", nullptr},
                     {"is_blocking", false}};
  Json card = {{"id", model.served_model_name},
               {"object", "model"},
               {"created", created},
               {"owned_by", "vllm"},
               {"root", model.root},
               {"parent", nullptr},
               // A pipeline has no context length: null, as for a model without one.
               {"max_model_len", model.max_model_len > 0 ? Json(model.max_model_len) : Json()},
               {"permission", Json::array({permission})}};
  return {{"object", "list"}, {"data", Json::array({card})}};
}

std::string base64_encode(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       (two ? static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(two ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Json images_response(int64_t created, const std::vector<std::string>& pngs) {
  Json data = Json::array();
  for (const std::string& png : pngs) {
    data.push_back(
        {{"b64_json", base64_encode(png)}, {"url", nullptr}, {"revised_prompt", nullptr}});
  }
  return {{"created", created}, {"data", std::move(data)}};
}

Json tokenize_response(const std::vector<int32_t>& ids, bool return_token_strs,
                       const ModelInfo& model) {
  Json out = {{"count", ids.size()},
              {"max_model_len", model.max_model_len},
              {"tokens", ids},
              {"token_strs", nullptr}};
  if (return_token_strs) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(model.tokenizer->id_to_piece(id));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

}  // namespace qs::server
