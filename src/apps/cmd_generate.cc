// apps: `quantserve generate --model DIR --prompt TEXT [sampling flags]`: one completion,
// streamed to stdout as it is generated (stdout holds the completion and nothing else);
// load time and speeds go to stderr. Sampling defaults come from the checkpoint's
// generation_config.json where the flags are absent, as vLLM does. `--image FILE`,
// `--audio FILE` and `--video FILE` (repeatable) give a multimodal model (Qwen2.5-VL,
// Qwen2.5-Omni) images, sound clips and videos: a user message of image parts, then audio
// parts, then video parts, then the prompt, through the
// model's chat template when it has one, else each item's marked placeholder
// (<|vision_start|><|image_pad|><|vision_end|>, ...) on a line before the prompt; the
// placeholders are then widened to the items' tokens, as the server's chat endpoint does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/media_inputs.h"
#include "apps/model_flags.h"
#include "apps/sampling_flags.h"
#include "apps/tensor_parallel.h"
#include "core/mmap_file.h"
#include "engine/engine.h"
#include "engine/eos_ids.h"
#include "engine/memory_budget.h"
#include "io/generation_config.h"
#include "models/model.h"
#include "server/chat_content.h"
#include "server/chat_media.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "vision/video_sound.h"

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

server::MediaConfigs configs(const MediaInputs& media) {
  return {media.images.get(), media.clips.get(), media.videos.get()};
}

// The files of --image, --audio and --video, decoded and processed with the checkpoint's
// preprocessor config.
Result<std::vector<models::PlaceholderItem>> read_media(const std::vector<std::string>& images,
                                                        const std::vector<std::string>& clips,
                                                        const std::vector<std::string>& videos,
                                                        bool use_audio_in_video,
                                                        const MediaInputs& media) {
  std::vector<models::PlaceholderItem> items;
  for (const std::string& path : images) {
    QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    QS_ASSIGN_OR_RETURN(vision::PromptImage image,
                        vision::prepare_prompt_image(bytes, path, media.images->processor));
    items.push_back(vision::image_placeholder(image, *media.images));
  }
  for (const std::string& path : clips) {
    QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    QS_ASSIGN_OR_RETURN(audio::PromptAudio clip,
                        audio::prepare_prompt_audio(bytes, path, *media.clips));
    items.push_back(audio::audio_placeholder(clip, *media.clips));
  }
  for (const std::string& path : videos) {
    QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    vision::VideoPromptOptions options;  // 2 frames a second, as the server samples them
    options.seconds = media.videos->seconds;
    QS_ASSIGN_OR_RETURN(
        vision::PromptVideo video,
        vision::prepare_prompt_video(bytes, path, media.videos->processor, options));
    items.push_back(vision::video_placeholder(video, *media.videos));
  }
  return items;
}

// The prompt's ids with one placeholder per item (widened later): through the chat template
// (`chat`: null when the model has none) as the server renders a user message of image parts,
// audio parts and text, else raw with the placeholders first.
Result<std::vector<int32_t>> media_prompt_ids(const std::string& prompt, size_t n_images,
                                              size_t n_clips, size_t n_videos,
                                              const MediaInputs& media,
                                              const tok::Tokenizer& tokenizer,
                                              const tok::ChatTemplate* chat) {
  const server::MediaPlaceholders placeholders =
      server::media_placeholders(tokenizer, configs(media));
  if (chat == nullptr) {
    std::string text;
    for (size_t i = 0; i < n_images; ++i) text += placeholders.image;
    for (size_t i = 0; i < n_clips; ++i) text += placeholders.audio;
    for (size_t i = 0; i < n_videos; ++i) text += placeholders.video;
    return tokenizer.encode(text + prompt, /*add_special_tokens=*/true);
  }
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (size_t i = 0; i < n_images; ++i) {
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "file://"}}}});
  }
  for (size_t i = 0; i < n_clips; ++i) {
    parts.push_back({{"type", "audio_url"}, {"audio_url", {{"url", "file://"}}}});
  }
  for (size_t i = 0; i < n_videos; ++i) {
    parts.push_back({{"type", "video_url"}, {"video_url", {{"url", "file://"}}}});
  }
  parts.push_back({{"type", "text"}, {"text", prompt}});
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", parts}});
  server::ChatMessages parsed;
  const bool openai_format = server::template_iterates_content(chat->source());
  if (auto e = server::parse_chat_messages(messages, openai_format, placeholders, &parsed)) {
    return invalid_argument(e->message);
  }
  QS_ASSIGN_OR_RETURN(std::string text,
                      chat->render(parsed.messages, /*add_generation_prompt=*/true));
  return tokenizer.encode(text, /*add_special_tokens=*/false);
}

Status run(const Flags& flags) {
  if (flags.get("model").empty()) return invalid_argument("--model is required");
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));

  const auto load_start = std::chrono::steady_clock::now();
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> tp, tensor_parallel_group(flags));
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, load_tensor_parallel_model(dir, load, tp));
  if (tp != nullptr && tp->rank() != 0) return run_worker_rank(*model, threads);
  WorkerRelease release_workers(tp.get());
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  const double load_s = seconds_since(load_start);

  engine::EngineRequest request;
  request.id = "generate";
  QS_RETURN_IF_ERROR(sampling_params_from_flags(flags, gen, kDefaultMaxTokens, &request.params));
  request.params.ignore_eos = flags.get_bool("ignore-eos");
  QS_ASSIGN_OR_RETURN(const std::string prompt, prompt_from_flags(flags));
  const std::vector<std::string> image_paths = flags.get_all("image");
  const std::vector<std::string> audio_paths = flags.get_all("audio");
  const std::vector<std::string> video_paths = flags.get_all("video");
  const bool use_audio_in_video = flags.get_bool("use-audio-in-video");
  MediaInputs media;
  if (!image_paths.empty() || !audio_paths.empty() || !video_paths.empty()) {
    QS_ASSIGN_OR_RETURN(media, load_media_inputs(dir, model->config()));
    if (!image_paths.empty() && media.vision == nullptr) {
      return invalid_argument(dir +
                              " has no vision tower: --image needs a vision-language "
                              "model (Qwen2.5-VL, Qwen2.5-Omni)");
    }
    if (use_audio_in_video && media.audio == nullptr) {
      return invalid_argument(dir + " has no audio tower: --use-audio-in-video needs Qwen2.5-Omni");
    }
    if (!video_paths.empty() && media.videos == nullptr) {
      return invalid_argument(dir +
                              " takes no videos: --video needs a vision-language model "
                              "(Qwen2.5-VL, Qwen2.5-Omni)");
    }
    if (!audio_paths.empty() && media.audio == nullptr) {
      return invalid_argument(dir + " has no audio tower: --audio needs Qwen2.5-Omni");
    }
    QS_ASSIGN_OR_RETURN(
        std::vector<models::PlaceholderItem> items,
        read_media(image_paths, audio_paths, video_paths, use_audio_in_video, media));
    Result<tok::ChatTemplate> chat = tok::ChatTemplate::from_model_dir(dir);
    if (!chat.ok() && (flags.get_bool("chat") || chat.status().code() != StatusCode::kNotFound))
      return chat.status();
    QS_ASSIGN_OR_RETURN(
        request.prompt_ids,
        media_prompt_ids(prompt, image_paths.size(), audio_paths.size(), video_paths.size(), media,
                         *tokenizer, chat.ok() ? &*chat : nullptr));
    QS_ASSIGN_OR_RETURN(
        request.mm_items,
        models::expand_placeholders(&request.prompt_ids, server::media_kinds(configs(media)),
                                    std::move(items)));
  } else if (flags.get_bool("chat")) {
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

  const std::vector<int32_t> eos = engine::merged_eos_ids(model->config(), gen, *tokenizer);
  // The engine stops at the end of the context; say so up front rather than only in the
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

  // One request: the cache holds exactly its prompt and max_tokens (within the context).
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  engine::EngineConfig config;
  config.vision = media.vision.get();
  config.audio = media.audio.get();
  QS_ASSIGN_OR_RETURN(config.kv_cache_dtype, kv_cache_dtype_from_flags(flags));
  config.max_model_len = std::min<int64_t>(model->config().max_position_embeddings,
                                           prompt_len + request.params.max_tokens);
  QS_ASSIGN_OR_RETURN(config.kv_cache_bytes,
                      engine::kv_cache_bytes_for_tokens(model->local_config(), config.max_model_len,
                                                        config.block_size, config.kv_cache_dtype));
  ThreadPool pool(static_cast<int>(threads));
  QS_ASSIGN_OR_RETURN(auto engine,
                      engine::Engine::create(*model, tokenizer.get(), eos, pool, config));
  QS_RETURN_IF_ERROR(engine->add_request(std::move(request)));

  const auto start = std::chrono::steady_clock::now();
  double prefill_s = 0;
  int64_t generated = 0;
  std::string finish_reason;
  while (engine->has_unfinished()) {
    for (const engine::RequestOutput& out : engine->step()) {
      if (!out.error.ok()) return out.error;
      if (generated == 0 && !out.new_token_ids.empty()) prefill_s = seconds_since(start);
      generated += static_cast<int64_t>(out.new_token_ids.size());
      std::fwrite(out.new_text.data(), 1, out.new_text.size(), stdout);
      std::fflush(stdout);
      if (out.finished) finish_reason = out.finish_reason;
    }
  }
  const double decode_s = seconds_since(start) - prefill_s;
  std::fprintf(stderr,
               "\n[generate] load %.2f s | prompt %lld tokens, %.1f tok/s | %lld generated, "
               "%.1f tok/s | finish: %s | %d threads\n",
               load_s, static_cast<long long>(prompt_len),
               prefill_s > 0 ? prompt_len / prefill_s : 0.0, static_cast<long long>(generated),
               decode_s > 0 ? (generated - 1) / decode_s : 0.0, finish_reason.c_str(),
               static_cast<int>(threads));
  return ok_status();
}

}  // namespace

int cmd_generate(const Args& args) {
  Flags flags;
  flags.add("model", "checkpoint directory (config.json, *.safetensors, tokenizer files)")
      .add("prompt", "prompt text (empty: generate from BOS)")
      .add("prompt-file", "read the prompt from FILE instead (\"-\": standard input)")
      .add("chat", "wrap the prompt as a user message in the model's chat template", true)
      .add("image",
           "an image (JPEG, PNG, WebP) for a vision-language model; repeat for several. The "
           "prompt then goes through the chat template when the model has one")
      .add("audio",
           "a sound clip (WAV, FLAC, OGG, MP3, ...) for Qwen2.5-Omni; repeat for several. "
           "Resampled to the feature extractor's rate")
      .add("video",
           "a video (MP4, MOV, WebM, MKV, AVI, ...) for a vision-language model, sampled at 2 "
           "frames a second; repeat for several")
      .add("use-audio-in-video",
           "Qwen2.5-Omni: hear each --video's own sound track too (vLLM's "
           "mm_processor_kwargs use_audio_in_video)",
           true)
      .add("ignore-eos", "keep generating past EOS", true);
  add_model_flags(flags);
  add_kv_cache_dtype_flag(flags);
  add_tensor_parallel_flags(flags);
  add_sampling_flags(flags, kDefaultMaxTokens);
  return run_command(kUsageName, flags, args, check_sampling_flag_values, run);
}

}  // namespace qs::apps
