// apps: `quantserve chat --model DIR [--system TEXT] [sampling flags]`: an interactive
// conversation over stdin (a terminal or a pipe). Each line is a user turn; the whole
// conversation is rendered with the model's chat template and the reply is streamed to
// stdout. Ends on EOF or /exit; /reset starts a new conversation. Diagnostics go to stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "apps/sampling_flags.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/eos_ids.h"
#include "engine/memory_budget.h"
#include "io/generation_config.h"
#include "models/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::apps {
namespace {

constexpr const char* kUsageName = "chat";
constexpr int64_t kDefaultMaxTokens = 512;

// Conversation state and the loaded pieces a turn needs.
struct Session {
  const tok::Tokenizer& tokenizer;
  const tok::ChatTemplate& chat_template;
  engine::Engine& engine;  // lives across turns: each turn's prompt hits the prefix cache
  const SamplingParams& params;
  const nlohmann::ordered_json& template_kwargs;
  bool verbose_prompt;
  bool stats;
  nlohmann::ordered_json messages;  // [{role, content}], the system message first if any
  int64_t n_turns = 0;
};

// One user turn: render, generate with the reply streamed to stdout, keep the reply. A turn
// that fails (e.g. the conversation no longer fits the context) leaves the conversation as
// it was before the turn.
Status run_turn(Session& s, const std::string& user_text) {
  nlohmann::ordered_json messages = s.messages;
  messages.push_back({{"role", "user"}, {"content", user_text}});
  QS_ASSIGN_OR_RETURN(std::string prompt,
                      s.chat_template.render(messages,
                                             /*add_generation_prompt=*/true, s.template_kwargs));
  if (s.verbose_prompt)
    std::fprintf(stderr, "[chat] prompt:\n%s\n[chat] end of prompt\n", prompt.c_str());
  engine::EngineRequest request;
  request.id = "turn-" + std::to_string(++s.n_turns);
  // As apply_chat_template: the template writes any BOS itself.
  request.prompt_ids = s.tokenizer.encode(prompt, /*add_special_tokens=*/false);
  if (request.prompt_ids.empty()) {
    return invalid_argument("the chat template rendered an empty prompt");
  }
  request.params = s.params;
  const size_t prompt_len = request.prompt_ids.size();
  const auto start = std::chrono::steady_clock::now();
  QS_RETURN_IF_ERROR(s.engine.add_request(std::move(request)));
  std::string reply;
  size_t n_generated = 0;
  std::string finish_reason;
  Status failed;
  while (s.engine.has_unfinished()) {
    for (const engine::RequestOutput& out : s.engine.step()) {
      if (!out.error.ok()) failed = out.error;
      n_generated += out.new_token_ids.size();
      reply += out.new_text;
      std::fwrite(out.new_text.data(), 1, out.new_text.size(), stdout);
      std::fflush(stdout);
      if (out.finished) finish_reason = out.finish_reason;
    }
  }
  QS_RETURN_IF_ERROR(failed);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (s.stats) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "[chat] prompt %zu tokens | %zu generated in %.2f s | finish: %s\n",
                 prompt_len, n_generated, secs, finish_reason.c_str());
  }
  messages.push_back({{"role", "assistant"}, {"content", reply}});
  s.messages = std::move(messages);
  return ok_status();
}

// {} when the flag is absent.
Result<nlohmann::ordered_json> parse_template_kwargs(const Flags& flags) {
  if (!flags.has("chat-template-kwargs")) return nlohmann::ordered_json::object();
  auto kwargs = nlohmann::ordered_json::parse(flags.get("chat-template-kwargs"), nullptr,
                                              /*allow_exceptions=*/false);
  if (!kwargs.is_object()) {
    return invalid_argument("--chat-template-kwargs must be a JSON object, got '" +
                            flags.get("chat-template-kwargs") + "'");
  }
  return kwargs;
}

// Malformed numbers and JSON are usage errors (exit 2), caught before anything loads.
Status check_flag_values(const Flags& flags) {
  QS_RETURN_IF_ERROR(check_sampling_flag_values(flags));
  return parse_template_kwargs(flags).status();
}

Status run(const Flags& flags) {
  if (flags.get("model").empty()) return invalid_argument("--model is required");
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));
  QS_ASSIGN_OR_RETURN(nlohmann::ordered_json template_kwargs, parse_template_kwargs(flags));

  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir, load));
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  QS_ASSIGN_OR_RETURN(tok::ChatTemplate chat_template, tok::ChatTemplate::from_model_dir(dir));
  SamplingParams params;
  QS_RETURN_IF_ERROR(sampling_params_from_flags(flags, gen, kDefaultMaxTokens, &params));
  QS_RETURN_IF_ERROR(params.validate(tokenizer->vocab_size()));

  const std::vector<int32_t> eos = engine::merged_eos_ids(model->config(), gen, *tokenizer);

  // The engine lives for the whole conversation, sized for one request of the model's
  // context, or of what half the free memory holds if that is less.
  engine::EngineConfig config;
  QS_ASSIGN_OR_RETURN(config.kv_cache_dtype, kv_cache_dtype_from_flags(flags));
  config.max_model_len = model->config().max_position_embeddings;
  const int64_t token_bytes =
      engine::kv_cache_bytes_per_token(model->config(), config.kv_cache_dtype);
  QS_ASSIGN_OR_RETURN(int64_t budget, engine::kv_cache_bytes_from_memory_fraction(0.5));
  const int64_t max_tokens_in_budget = budget / token_bytes / config.block_size * config.block_size;
  if (max_tokens_in_budget < config.max_model_len) {
    QS_LOG_WARN("chat: the context is limited to %lld tokens (half the free memory)",
                static_cast<long long>(max_tokens_in_budget));
    config.max_model_len = max_tokens_in_budget;
  }
  QS_ASSIGN_OR_RETURN(config.kv_cache_bytes,
                      engine::kv_cache_bytes_for_tokens(model->config(), config.max_model_len,
                                                        config.block_size, config.kv_cache_dtype));
  ThreadPool pool(static_cast<int>(threads));
  QS_ASSIGN_OR_RETURN(auto engine,
                      engine::Engine::create(*model, tokenizer.get(), eos, pool, config));
  Session session{*tokenizer,
                  chat_template,
                  *engine,
                  params,
                  template_kwargs,
                  flags.get_bool("verbose-prompt"),
                  flags.get_bool("stats"),
                  nlohmann::ordered_json::array()};
  const std::string system = flags.get("system");
  if (!system.empty()) session.messages.push_back({{"role", "system"}, {"content", system}});

  // The "> " prompt and the greeting only make sense for a person at a terminal; piped
  // input gets replies on stdout and nothing else.
  const bool interactive = isatty(STDIN_FILENO) != 0;
  if (interactive) {
    std::fprintf(stderr, "quantserve chat: %s. /exit to quit, /reset for a new conversation.\n",
                 dir.c_str());
  }
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      session.messages.erase(session.messages.begin() + (system.empty() ? 0 : 1),
                             session.messages.end());
      continue;
    }
    if (Status s = run_turn(session, line); !s.ok()) {
      // The conversation goes on: the user can /reset or say something shorter.
      std::fprintf(stderr, "quantserve chat: %s\n", s.message().c_str());
    }
  }
  if (interactive) std::fprintf(stderr, "\n");
  return ok_status();
}

}  // namespace

int cmd_chat(const Args& args) {
  Flags flags;
  flags.add("model", "checkpoint directory (config.json, *.safetensors, tokenizer, chat template)")
      .add("system", "system message that opens the conversation")
      .add("chat-template-kwargs",
           "JSON object of extra template variables, e.g. "
           "'{\"enable_thinking\": false}'")
      .add("verbose-prompt", "print each rendered prompt to stderr", true)
      .add("stats", "print tokens and time of each reply to stderr", true);
  add_model_flags(flags);
  add_kv_cache_dtype_flag(flags);
  add_sampling_flags(flags, kDefaultMaxTokens);
  return run_command(kUsageName, flags, args, check_flag_values, run);
}

}  // namespace qs::apps
