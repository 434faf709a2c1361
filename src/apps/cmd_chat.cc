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
#include "engine/generator.h"
#include "io/generation_config.h"
#include "models/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::apps {
namespace {

constexpr const char* kUsageName = "chat";
constexpr int64_t kDefaultMaxTokens = 512;

// Flag if given, else generation_config.json's value if any, else SamplingParams' default
// (the same precedence as `generate`, which is vLLM's).
Status sampling_params(const Flags& flags, const io::GenerationConfig& gen, SamplingParams* p) {
  auto pick = [&](const char* flag, std::optional<double> from_config, float* out) -> Status {
    if (flags.has(flag)) {
      QS_ASSIGN_OR_RETURN(double v, flags.get_double(flag));
      *out = static_cast<float>(v);
    } else if (from_config) {
      *out = static_cast<float>(*from_config);
    }
    return ok_status();
  };
  QS_RETURN_IF_ERROR(pick("temperature", gen.temperature, &p->temperature));
  QS_RETURN_IF_ERROR(pick("top-p", gen.top_p, &p->top_p));
  QS_RETURN_IF_ERROR(pick("min-p", std::nullopt, &p->min_p));
  QS_RETURN_IF_ERROR(pick("repetition-penalty", gen.repetition_penalty, &p->repetition_penalty));
  QS_RETURN_IF_ERROR(pick("presence-penalty", std::nullopt, &p->presence_penalty));
  QS_RETURN_IF_ERROR(pick("frequency-penalty", std::nullopt, &p->frequency_penalty));
  if (flags.has("top-k")) {
    QS_ASSIGN_OR_RETURN(int64_t k, flags.get_int("top-k"));
    if (k < -1 || k > INT32_MAX) {
      return invalid_argument("--top-k must be -1, 0 or a positive count, got " +
                              std::to_string(k));
    }
    p->top_k = static_cast<int32_t>(k);
  } else if (gen.top_k) {
    p->top_k = static_cast<int32_t>(*gen.top_k);  // transformers' 0 means off, as ours
  }
  int64_t max_tokens = gen.max_new_tokens.value_or(kDefaultMaxTokens);
  if (flags.has("max-tokens")) {
    QS_ASSIGN_OR_RETURN(max_tokens, flags.get_int("max-tokens"));
  }
  if (max_tokens < 1 || max_tokens > INT32_MAX) {
    return invalid_argument("--max-tokens must be at least 1, got " + std::to_string(max_tokens));
  }
  p->max_tokens = static_cast<int32_t>(max_tokens);
  if (flags.has("seed")) {
    QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
    p->seed = static_cast<uint64_t>(seed);
  }
  p->stop = flags.get_all("stop");
  return ok_status();
}

// Conversation state and the loaded pieces a turn needs.
struct Session {
  const tok::Tokenizer& tokenizer;
  const tok::ChatTemplate& chat_template;
  engine::Generator& generator;
  const SamplingParams& params;
  const nlohmann::ordered_json& template_kwargs;
  bool verbose_prompt;
  bool stats;
  nlohmann::ordered_json messages;  // [{role, content}], the system message first if any
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
  engine::GenerationRequest request;
  // As apply_chat_template: the template writes any BOS itself.
  request.prompt_ids = s.tokenizer.encode(prompt, /*add_special_tokens=*/false);
  if (request.prompt_ids.empty()) {
    return invalid_argument("the chat template rendered an empty prompt");
  }
  request.params = s.params;
  const auto start = std::chrono::steady_clock::now();
  auto results = s.generator.generate({request}, [](size_t, const StepOutput& step) {
    std::fwrite(step.text.data(), 1, step.text.size(), stdout);
    std::fflush(stdout);
  });
  if (!results.ok()) return results.status();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const engine::GenerationResult& reply = (*results)[0];
  if (s.stats) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "[chat] prompt %zu tokens | %zu generated in %.2f s | finish: %s\n",
                 request.prompt_ids.size(), reply.output_ids.size(), secs,
                 reply.finish_reason.c_str());
  }
  messages.push_back({{"role", "assistant"}, {"content", reply.text}});
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
  for (const char* name : {"max-tokens", "top-k", "seed", "threads"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_int(name).status());
  }
  for (const char* name : {"temperature", "top-p", "min-p", "repetition-penalty",
                           "presence-penalty", "frequency-penalty"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_double(name).status());
  }
  return parse_template_kwargs(flags).status();
}

Status run(const Flags& flags) {
  const std::string dir = flags.get("model");
  if (dir.empty()) return invalid_argument("--model is required");
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads < 1 || threads > 1024) {
    return invalid_argument("--threads must be in [1, 1024], got " + std::to_string(threads));
  }
  QS_ASSIGN_OR_RETURN(nlohmann::ordered_json template_kwargs, parse_template_kwargs(flags));

  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir));
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  QS_ASSIGN_OR_RETURN(tok::ChatTemplate chat_template, tok::ChatTemplate::from_model_dir(dir));
  SamplingParams params;
  QS_RETURN_IF_ERROR(sampling_params(flags, gen, &params));
  QS_RETURN_IF_ERROR(params.validate(tokenizer->vocab_size()));

  // EOS from config.json, generation_config.json and the tokenizer, as vLLM merges them; chat
  // models list their end-of-turn token there (e.g. <|im_end|>).
  std::vector<int32_t> eos = model->config().eos_token_ids;
  for (int64_t id : gen.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (tokenizer->eos_id() >= 0) eos.push_back(tokenizer->eos_id());

  ThreadPool pool(static_cast<int>(threads));
  engine::Generator generator(*model, *tokenizer, eos, pool);
  Session session{*tokenizer,
                  chat_template,
                  generator,
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
      .add("max-tokens", "tokens per reply at most", false,
           std::to_string(kDefaultMaxTokens) + " or generation_config.json")
      .add("temperature", "0 = greedy", false, "1.0 or generation_config.json")
      .add("top-p", "nucleus sampling mass")
      .add("top-k", "keep the k most likely tokens (0 or -1 = all)")
      .add("min-p", "drop tokens below min-p x the top probability")
      .add("repetition-penalty", "> 1 discourages tokens already in prompt or output")
      .add("presence-penalty", "subtracted once from each generated token")
      .add("frequency-penalty", "subtracted per occurrence in the output")
      .add("seed", "RNG seed of every reply")
      .add("stop", "stop string (repeatable)")
      .add("chat-template-kwargs",
           "JSON object of extra template variables, e.g. "
           "'{\"enable_thinking\": false}'")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("verbose-prompt", "print each rendered prompt to stderr", true)
      .add("stats", "print tokens and time of each reply to stderr", true);
  Status s = flags.parse(args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kUsageName).c_str());
    return 0;
  }
  if (s.ok() && !flags.positionals().empty()) {
    s = invalid_argument("unexpected argument '" + flags.positionals()[0] + "'");
  }
  if (s.ok()) s = check_flag_values(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve chat: %s\n\n%s", s.message().c_str(),
                 flags.usage(kUsageName).c_str());
    return 2;
  }
  if (s = run(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve chat: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
