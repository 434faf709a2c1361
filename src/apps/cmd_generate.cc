// apps: `quantserve generate --model DIR --prompt TEXT [sampling flags]`: one completion,
// streamed to stdout as it is generated (stdout holds the completion and nothing else);
// load time and speeds go to stderr. Sampling defaults come from the checkpoint's
// generation_config.json where the flags are absent, as vLLM does.
#include <chrono>
#include <cstdio>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "apps/sampling_flags.h"
#include "core/mmap_file.h"
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

// --prompt TEXT, or --prompt-file FILE ("-" reads stdin), not both.
Result<std::string> prompt_from_flags(const Flags& flags) {
  if (!flags.has("prompt-file")) return flags.get("prompt");
  if (flags.has("prompt")) return invalid_argument("give --prompt or --prompt-file, not both");
  const std::string path = flags.get("prompt-file");
  if (path != "-") return read_file(path);
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), stdin)) > 0) text.append(buf, n);
  if (std::ferror(stdin)) return io_error("--prompt-file -: cannot read stdin");
  return text;
}

Status run(const Flags& flags) {
  const std::string dir = flags.get("model");
  if (dir.empty()) return invalid_argument("--model is required");
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));

  const auto load_start = std::chrono::steady_clock::now();
  QS_ASSIGN_OR_RETURN(auto model, models::Model::load(dir, load_options_from_flags(flags)));
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  const double load_s = seconds_since(load_start);

  engine::GenerationRequest request;
  QS_RETURN_IF_ERROR(sampling_params_from_flags(flags, gen, kDefaultMaxTokens, &request.params));
  request.params.ignore_eos = flags.get_bool("ignore-eos");
  QS_ASSIGN_OR_RETURN(const std::string prompt, prompt_from_flags(flags));
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

  const std::vector<int32_t> eos = merged_eos_ids(model->config(), gen, *tokenizer);
  // The generator stops at the end of the context; say so up front rather than only in the
  // finish reason.
  const int64_t room =
      model->config().max_position_embeddings - static_cast<int64_t>(request.prompt_ids.size());
  if (room > 0 && request.params.max_tokens > room) {
    std::fprintf(stderr,
                 "quantserve generate: --max-tokens %d cut to %lld: the prompt's %zu tokens "
                 "leave that much of the model's context of %lld\n",
                 request.params.max_tokens, static_cast<long long>(room), request.prompt_ids.size(),
                 static_cast<long long>(model->config().max_position_embeddings));
    request.params.max_tokens = static_cast<int32_t>(room);
  }

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
      .add("prompt-file", "read the prompt from FILE instead (\"-\": standard input)")
      .add("chat", "wrap the prompt as a user message in the model's chat template", true)
      .add("ignore-eos", "keep generating past EOS", true);
  add_model_flags(flags);
  add_sampling_flags(flags, kDefaultMaxTokens);
  return run_command(kUsageName, flags, args, check_sampling_flag_values, run);
}

}  // namespace qs::apps
