// tokenizer: a model's chat template (the Jinja program in tokenizer_config.json or
// chat_template.jinja), rendered the way transformers' apply_chat_template renders it:
// jinja2 with trim_blocks and lstrip_blocks, raise_exception, strftime_now, HF's tojson.
// The same messages give the same prompt bytes as the Python stack.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "template/jinja_eval.h"

namespace qs::tok {

class ChatTemplate {
 public:
  // Reads `dir`/chat_template.jinja when present (newer checkpoints; it wins, as in
  // transformers), else `chat_template` of tokenizer_config.json: a string, or a list of
  // {name, template} of which "default" is used. bos_token/eos_token come from
  // tokenizer_config.json as strings or {"content": ...} objects.
  static Result<ChatTemplate> from_model_dir(const std::string& dir);
  // Parses `source` now, so syntax errors surface here rather than per request.
  static Result<ChatTemplate> from_string(const std::string& source,
                                          std::optional<std::string> bos_token = std::nullopt,
                                          std::optional<std::string> eos_token = std::nullopt);
  // vLLM's --chat-template (serve) and LLM.chat(chat_template=): the path of a file that holds
  // the template, else the template itself. Like vLLM's, it renders without the checkpoint's
  // bos_token and eos_token.
  static Result<ChatTemplate> from_file_or_string(const std::string& file_or_source);

  // Renders with the context apply_chat_template builds: `messages`, `tools` (None unless
  // extra_context has it), `documents` (None), `add_generation_prompt`, bos_token and
  // eos_token when known, then every key of `extra_context` (e.g. enable_thinking,
  // date_string, tools). Key order of JSON objects is kept: `tojson` prints it. A plain
  // nlohmann::json converts implicitly, but its objects arrive with keys sorted.
  // `limits` bounds the work and output of one render (jinja_eval.h).
  Result<std::string> render(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object(),
      const jinja::RenderLimits& limits = jinja::RenderLimits{}) const;

  const std::string& source() const { return source_; }
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  std::string source_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> body_;
};

}  // namespace qs::tok
