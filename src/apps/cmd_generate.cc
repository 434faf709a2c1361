// apps: `quantserve generate --model DIR --prompt TEXT [sampling flags]`: one completion,
// streamed to stdout as it is generated (stdout holds the completion and nothing else);
// load time and speeds go to stderr. Sampling defaults come from the checkpoint's
// generation_config.json where the flags are absent, as vLLM does.
#include <chrono>
#include <cstdio>
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

constexpr const char* kUsageName = "generate";
constexpr int64_t kDefaultMaxTokens = 256;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Flag if given, else generation_config.json's value if any, else SamplingParams' default.
Status sampling_params(const Flags& flags, const io::GenerationConfig& gen, SamplingParams* p) {
  auto pick_double = [&](const char* flag, std::optional<double> from_config,
                         float* out) -> Status {
    if (flags.has(flag)) {
      QS_ASSIGN_OR_RETURN(double v, flags.get_double(flag));
      *out = static_cast<float>(v);
    } else if (from_config) {
      *out = static_cast<float>(*from_config);
    }
    return ok_status();
  };
  QS_RETURN_IF_ERROR(pick_double("temperature", gen.temperature, &p->temperature));
  QS_RETURN_IF_ERROR(pick_double("top-p", gen.top_p, &p->top_p));
  QS_RETURN_IF_ERROR(pick_double("min-p", std::nullopt, &p->min_p));
  QS_RETURN_IF_ERROR(
      pick_double("repetition-penalty", gen.repetition_penalty, &p->repetition_penalty));
  QS_RETURN_IF_ERROR(pick_double("presence-penalty", std::nullopt, &p->presence_penalty));
  QS_RETURN_IF_ERROR(pick_double("frequency-penalty", std::nullopt, &p->frequency_penalty));
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
  p->ignore_eos = flags.get_bool("ignore-eos");
  return ok_status();
}

// Malformed numbers are usage errors (exit 2), caught before anything loads.
Status check_numbers(const Flags& flags) {
  for (const char* name : {"max-tokens", "top-k", "seed", "threads"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_int(name).status());
  }
  for (const char* name : {"temperature", "top-p", "min-p", "repetition-penalty",
                           "presence-penalty", "frequency-penalty"}) {
    if (flags.has(name)) QS_RETURN_IF_ERROR(flags.get_double(name).status());
  }
  return ok_status();
}

Status run(const Flags& flags) {
  const std::string dir = flags.get("model");
  if (dir.empty()) return invalid_argument("--model is required");
  QS_ASSIGN_OR_RETURN(int64_t threads, flags.get_int("threads"));
  if (threads < 1 || threads > 1024) {
    return invalid_argument("--threads must be in [1, 1024], got " + std::to_string(threads));
  }

  const auto load_start = std::chrono::steady_clock::now();
  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir));
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  const double load_s = seconds_since(load_start);

  engine::GenerationRequest request;
  QS_RETURN_IF_ERROR(sampling_params(flags, gen, &request.params));
  const std::string prompt = flags.get("prompt");
  if (flags.get_bool("chat")) {
    QS_ASSIGN_OR_RETURN(tok::ChatTemplate chat, tok::ChatTemplate::from_model_dir(dir));
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", prompt}});
    QS_ASSIGN_OR_RETURN(std::string text, chat.render(messages, /*add_generation_prompt=*/true));
    // As apply_chat_template: the template writes any BOS itself.
    request.prompt_ids = tokenizer->encode(text, /*add_special_tokens=*/false);
  } else {
    // BOS as tokenizer_config.json's add_bos_token says.
    request.prompt_ids = tokenizer->encode(prompt, /*add_special_tokens=*/true);
  }
  if (request.prompt_ids.empty()) {
    return invalid_argument(
        "the prompt is empty and the tokenizer adds no BOS token to start from");
  }

  // EOS from config.json, generation_config.json and the tokenizer, as vLLM merges them.
  std::vector<int32_t> eos = model->config().eos_token_ids;
  for (int64_t id : gen.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (tokenizer->eos_id() >= 0) eos.push_back(tokenizer->eos_id());

  ThreadPool pool(static_cast<int>(threads));
  engine::Generator generator(*model, *tokenizer, eos, pool);
  auto results = generator.generate({request}, [](size_t, const StepOutput& step) {
    std::fwrite(step.text.data(), 1, step.text.size(), stdout);
    std::fflush(stdout);
  });
  if (!results.ok()) return results.status();
  const engine::GenerationStats& st = generator.stats();
  std::fprintf(stderr,
               "\n[generate] load %.2f s | prompt %lld tokens, %.1f tok/s | %lld generated, "
               "%.1f tok/s | finish: %s | %d threads\n",
               load_s, static_cast<long long>(st.prompt_tokens),
               st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0,
               static_cast<long long>(st.generated_tokens),
               st.decode_seconds > 0 ? (st.generated_tokens - 1) / st.decode_seconds : 0.0,
               (*results)[0].finish_reason.c_str(), static_cast<int>(threads));
  return ok_status();
}

}  // namespace

int cmd_generate(const Args& args) {
  Flags flags;
  flags.add("model", "checkpoint directory (config.json, *.safetensors, tokenizer files)")
      .add("prompt", "prompt text (empty: generate from BOS)")
      .add("chat", "wrap the prompt as a user message in the model's chat template", true)
      .add("max-tokens", "tokens to generate at most", false,
           std::to_string(kDefaultMaxTokens) + " or generation_config.json")
      .add("temperature", "0 = greedy", false, "1.0 or generation_config.json")
      .add("top-p", "nucleus sampling mass")
      .add("top-k", "keep the k most likely tokens (-1 = all)")
      .add("min-p", "drop tokens below min-p x the top probability")
      .add("repetition-penalty", "> 1 discourages tokens already in prompt or output")
      .add("presence-penalty", "subtracted once from each generated token")
      .add("frequency-penalty", "subtracted per occurrence in the output")
      .add("seed", "RNG seed of the request")
      .add("stop", "stop string (repeatable)")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("ignore-eos", "keep generating past EOS", true);
  Status s = flags.parse(args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kUsageName).c_str());
    return 0;
  }
  if (s.ok() && !flags.positionals().empty()) {
    s = invalid_argument("unexpected argument '" + flags.positionals()[0] + "'");
  }
  if (s.ok()) s = check_numbers(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "quantserve generate: %s\n\n%s", s.message().c_str(),
                 flags.usage(kUsageName).c_str());
    return 2;
  }
  if (s = run(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve generate: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
