// apps: `quantserve serve MODEL_DIR [flags]`: the OpenAI-compatible HTTP server, with vLLM's
// flag names. Loads the model, tokenizer, chat template and generation_config.json, starts
// the engine thread and the HTTP server on 127.0.0.1:8000 by default, and runs until
// SIGTERM or SIGINT, which end in-flight requests ("abort") and exit 0. A diffusers pipeline
// directory (model_index.json) is served by what its family makes: an image model
// (/v1/images/generations; FLUX.1) or a video model (vLLM-Omni's /v1/videos API; Wan2.2)
// instead, and a Whisper checkpoint as a transcription model (/v1/audio/transcriptions).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "apps/cfg_parallel.h"
#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/media_inputs.h"
#include "apps/model_flags.h"
#include "apps/sampling_flags.h"
#include "apps/serve_data_parallel.h"
#include "apps/tensor_parallel.h"
#include "audio/transcribe.h"
#include "core/json.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "diffusion/pipeline.h"
#include "diffusion/pipeline_index.h"
#include "diffusion/pipeline_registry.h"
#include "engine/engine.h"
#include "engine/eos_ids.h"
#include "engine/memory_budget.h"
#include "io/generation_config.h"
#include "models/model.h"
#include "server/audio_backend.h"
#include "server/engine_backend.h"
#include "server/http_server.h"
#include "server/image_backend.h"
#include "server/video_backend.h"
#include "server/videos_handler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::apps {
namespace {

constexpr const char* kUsageLine = "serve MODEL_DIR|REPO_ID";

// `vllm serve MODEL` takes the model first; --model works too.
std::string model_dir(const Flags& flags) {
  if (!flags.positionals().empty()) return flags.positionals()[0];
  return flags.get("model");
}

Result<int64_t> int_flag(const Flags& flags, const char* name, int64_t lo, int64_t hi) {
  QS_ASSIGN_OR_RETURN(int64_t v, flags.get_int(name));
  if (v < lo || v > hi) {
    return invalid_argument("--" + std::string(name) + " must be in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got " + std::to_string(v));
  }
  return v;
}

// Bytes with an optional K/M/G/KiB/MiB/GiB suffix ("4GiB", "512M", "1073741824"), for the flag
// `flag`.
Result<int64_t> parse_bytes(const char* flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "KiB") scale = 1024.0;
  if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  if (end == text.c_str() || !(v > 0) || (scale == 1 && !suffix.empty() && suffix != "B")) {
    return invalid_argument("--" + std::string(flag) + " expects bytes like 4GiB or 512MiB, got '" +
                            text + "'");
  }
  return static_cast<int64_t>(v * scale);
}

// A week of audio is past any recording sent in one request, and keeps the sample counts it
// implies far from overflowing.
Result<double> max_audio_seconds(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(double v, flags.get_double("max-audio-seconds"));
  if (!(v > 0 && v <= 7 * 24 * 3600.0)) {
    return invalid_argument("--max-audio-seconds must be positive and at most a week");
  }
  return v;
}

// --limit-mm-per-prompt and --allowed-local-media-path (an existing directory, kept resolved
// so that file:// URLs are compared with its real path).
Result<server::MediaOptions> media_options(const Flags& flags) {
  server::MediaOptions media;
  if (flags.has("limit-mm-per-prompt")) {
    QS_RETURN_IF_ERROR(media_limits_from_flag(flags.get("limit-mm-per-prompt"), &media));
  }
  if (flags.has("allowed-local-media-path")) {
    const std::string dir = flags.get("allowed-local-media-path");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      return invalid_argument("--allowed-local-media-path " + dir + " is not a directory");
    }
    media.allowed_local_media_path = std::filesystem::canonical(dir, ec).string();
  }
  return media;
}

Status check_flag_values(const Flags& flags) {
  if (flags.positionals().size() > 1) {
    return invalid_argument("unexpected argument '" + flags.positionals()[1] + "'");
  }
  if (model_dir(flags).empty()) return invalid_argument("the model directory is required");
  QS_RETURN_IF_ERROR(int_flag(flags, "port", 0, 65535).status());
  QS_RETURN_IF_ERROR(thread_count(flags).status());
  QS_RETURN_IF_ERROR(int_flag(flags, "max-num-seqs", 1, 65536).status());
  QS_RETURN_IF_ERROR(int_flag(flags, "max-logprobs", 0, 1 << 20).status());
  if (flags.has("max-model-len"))
    QS_RETURN_IF_ERROR(int_flag(flags, "max-model-len", 1, INT32_MAX).status());
  if (flags.has("max-num-batched-tokens"))
    QS_RETURN_IF_ERROR(int_flag(flags, "max-num-batched-tokens", 1, INT32_MAX).status());
  if (flags.has("kv-cache-memory"))
    QS_RETURN_IF_ERROR(parse_bytes("kv-cache-memory", flags.get("kv-cache-memory")).status());
  if (flags.get("video-memory-budget") != "auto")
    QS_RETURN_IF_ERROR(
        parse_bytes("video-memory-budget", flags.get("video-memory-budget")).status());
  QS_RETURN_IF_ERROR(kv_cache_dtype_from_flags(flags).status());
  QS_RETURN_IF_ERROR(max_audio_seconds(flags).status());
  QS_RETURN_IF_ERROR(media_options(flags).status());
  return ok_status();
}

// --chat-template is a file, or the template itself (as vLLM); else the checkpoint's.
// A model without one serves completions only (chat requests get vLLM's 400).
Result<std::unique_ptr<tok::ChatTemplate>> load_chat_template(const Flags& flags,
                                                              const std::string& dir) {
  if (flags.has("chat-template")) {
    QS_ASSIGN_OR_RETURN(tok::ChatTemplate t,
                        tok::ChatTemplate::from_file_or_string(flags.get("chat-template")));
    return std::make_unique<tok::ChatTemplate>(std::move(t));
  }
  Result<tok::ChatTemplate> t = tok::ChatTemplate::from_model_dir(dir);
  if (!t.ok()) {
    if (t.status().code() != StatusCode::kNotFound) return t.status();
    QS_LOG_WARN("%s; /v1/chat/completions will answer 400 (pass --chat-template)",
                t.status().message().c_str());
    return std::unique_ptr<tok::ChatTemplate>();
  }
  return std::make_unique<tok::ChatTemplate>(std::move(*t));
}

// The KV cache's bytes from --kv-cache-memory or --gpu-memory-utilization (vLLM's names), else
// engine::serving_kv_cache_bytes' default for max_num_seqs sequences of max_model_len.
Result<int64_t> kv_cache_budget(const Flags& flags, const engine::EngineConfig& engine_config,
                                const models::ModelConfig& config) {
  engine::ServingKvCacheSize size;
  if (flags.has("kv-cache-memory")) {
    QS_ASSIGN_OR_RETURN(size.bytes, parse_bytes("kv-cache-memory", flags.get("kv-cache-memory")));
  } else if (flags.has("gpu-memory-utilization")) {
    QS_ASSIGN_OR_RETURN(size.memory_fraction, flags.get_double("gpu-memory-utilization"));
  }
  size.max_model_len = engine_config.max_model_len;
  size.max_num_seqs = engine_config.max_num_seqs;
  size.block_size = engine_config.block_size;
  size.cache_dtype = engine_config.kv_cache_dtype;
  return engine::serving_kv_cache_bytes(config, size);
}

// vLLM's defaults, overridden by the checkpoint's generation_config.json.
SamplingParams default_params(const io::GenerationConfig& gen) {
  SamplingParams p;
  if (gen.temperature) p.temperature = static_cast<float>(*gen.temperature);
  if (gen.top_p) p.top_p = static_cast<float>(*gen.top_p);
  if (gen.top_k) p.top_k = static_cast<int32_t>(*gen.top_k);
  if (gen.repetition_penalty) p.repetition_penalty = static_cast<float>(*gen.repetition_penalty);
  return p;
}

server::ServerOptions server_options(const Flags& flags, int64_t port, int64_t http_threads) {
  server::ServerOptions options;
  options.host = flags.get("host");
  options.port = static_cast<int>(port);
  options.api_key = flags.get("api-key");
  if (options.api_key.empty() && std::getenv("VLLM_API_KEY") != nullptr)
    options.api_key = std::getenv("VLLM_API_KEY");
  options.http_threads = static_cast<int>(std::min<int64_t>(http_threads, 1024));
  return options;
}

// Binds, logs the address (tests read the port from this line), serves until SIGINT or
// SIGTERM, then stops the HTTP side; the caller stops its engine after.
Status serve_until_signal(server::HttpServer& http, const server::ServerOptions& options,
                          const server::ModelInfo& info, const char* detail, sigset_t* signals) {
  QS_ASSIGN_OR_RETURN(int bound_port, http.bind());
  std::thread signal_thread([&http, signals] {
    int sig = 0;
    sigwait(signals, &sig);
    if (sig != SIGUSR1) {
      QS_LOG_INFO("received %s, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
      http.shutdown();
    }
  });
  QS_LOG_INFO("serving %s as '%s' on http://%s:%d (%s)", info.root.c_str(),
              info.served_model_name.c_str(), options.host.c_str(), bound_port, detail);
  Status served = http.serve();
  http.shutdown();
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  return served;
}

// The serve flags that only an LLM server reads: warned about, not refused, on the others.
void warn_llm_only_flags(const Flags& flags, const std::string& dir, const char* what) {
  for (const char* f : {"max-model-len", "chat-template", "max-logprobs", "max-num-seqs",
                        "max-num-batched-tokens", "kv-cache-memory", "gpu-memory-utilization",
                        "no-enable-prefix-caching", "enable-prompt-tokens-details", "quantization",
                        "kv-cache-dtype", "limit-mm-per-prompt", "allowed-local-media-path"}) {
    if (flags.has(f)) QS_LOG_WARN("--%s applies to LLMs only; %s is %s", f, dir.c_str(), what);
  }
}

// A diffusers pipeline directory (model_index.json, as vLLM-Omni detects diffusion models) of a
// family that makes images (FLUX.1): the pipeline behind /v1/images/generations. The LLM flags
// do not apply to it. With --cfg-parallel-size 2 under `mpirun -np 2`, rank 0 serves and rank 1
// runs the negative branch of every true-CFG image (apps/cfg_parallel.h; a family without CFG
// parallelism is refused there); a rank 1 that stops answering fails the image it was in and
// stops the server with an error.
Status run_pipeline(const Flags& flags, const std::string& dir, int threads, int64_t port,
                    sigset_t* signals) {
  warn_llm_only_flags(flags, dir, "an image pipeline");
  QS_ASSIGN_OR_RETURN(CfgParallelSetup cfg, cfg_parallel_setup(flags, threads));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::DiffusionPipeline> pipeline,
                      load_cfg_pipeline(dir, {}, cfg.group));
  ThreadPool pool(cfg.threads);
  if (cfg.worker()) {
    QS_LOG_INFO(
        "CFG-parallel rank 1 of %s: running the negative branch of rank 0's images, %d "
        "threads",
        cfg.group->describe().c_str(), cfg.threads);
    Status worked = pipeline->run_cfg_worker(pool);
    QS_LOG_INFO("CFG-parallel rank 1 stopped");
    return worked;
  }
  // Declared before the backend, so rank 1 is stopped only after the last image has ended.
  const CfgWorkerStop stop_worker(cfg.group);
  // The engine thread reports a broken group here; the watcher below stops the server on it.
  struct Broken {
    std::mutex mu;
    std::condition_variable cv;
    Status status;
    bool serving_over = false;
  } broken;
  if (cfg.group) {
    QS_RETURN_IF_ERROR(pipeline->set_cfg_parallel(cfg.group, [&broken](const Status& s) {
      std::lock_guard<std::mutex> lock(broken.mu);
      if (broken.status.ok()) broken.status = s;
      broken.cv.notify_all();
    }));
  }
  server::ModelInfo info;
  info.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_dir(flags);
  info.root = dir;
  const std::string class_name = pipeline->class_name();
  server::ImageBackend backend(std::move(pipeline), pool);
  server::ServerMetrics metrics(info.served_model_name, 0);
  // Requests wait in the backend's queue, each on its own HTTP thread.
  const server::ServerOptions options = server_options(flags, port, 64);
  server::HttpServer http(options, info, backend, metrics);
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(broken.mu);
    broken.cv.wait(lock, [&] { return !broken.status.ok() || broken.serving_over; });
    if (broken.status.ok()) return;
    QS_LOG_ERROR("CFG-parallel rank 1 lost (%s): stopping the server",
                 broken.status.message().c_str());
    lock.unlock();
    http.shutdown();
  });
  char detail[160];
  std::snprintf(detail, sizeof(detail), "%s, /v1/images/generations, %d threads%s",
                class_name.c_str(), cfg.threads, cfg.group ? ", CFG-parallel over 2 ranks" : "");
  Status served = serve_until_signal(http, options, info, detail, signals);
  {
    std::lock_guard<std::mutex> lock(broken.mu);
    broken.serving_over = true;
    broken.cv.notify_all();
  }
  watcher.join();
  backend.shutdown();
  QS_LOG_INFO("server stopped");
  std::lock_guard<std::mutex> lock(broken.mu);
  return broken.status.ok() ? served : broken.status;
}

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

// --video-memory-budget: bytes, or auto: the memory available now (after the pipeline has
// loaded) less a margin for everything else (a tenth of it, at least 512 MiB) and less what the
// finished MP4s kept for download may take.
Result<int64_t> video_memory_budget(const Flags& flags, int64_t kept_mp4_bytes) {
  const std::string flag = flags.get("video-memory-budget");
  if (flag != "auto") return parse_bytes("video-memory-budget", flag);
  QS_ASSIGN_OR_RETURN(int64_t available, engine::available_memory_bytes());
  const int64_t margin = std::max<int64_t>(available / 10, 512ll << 20);
  const int64_t budget = available - margin - kept_mp4_bytes;
  if (budget <= 0) {
    char message[256];
    std::snprintf(message, sizeof(message),
                  "--video-memory-budget auto: only %.2f GiB of memory is available after "
                  "loading the pipeline; give a budget in bytes (e.g. 2GiB)",
                  gib(available));
    return invalid_argument(message);
  }
  return budget;
}

// A pipeline directory of a family that makes videos (Wan2.2's text and image to video):
// vLLM-Omni's videos API, one video at a time on the engine thread, each request's peak memory
// held to --video-memory-budget. The LLM flags do not apply to it.
Status run_video_pipeline(const Flags& flags, const std::string& dir, int threads, int64_t port,
                          sigset_t* signals) {
  warn_llm_only_flags(flags, dir, "a video pipeline");
  QS_ASSIGN_OR_RETURN(std::unique_ptr<diffusion::DiffusionPipeline> pipeline,
                      diffusion::load_pipeline(dir));
  const server::VideoStoreLimits kept;
  QS_ASSIGN_OR_RETURN(int64_t budget, video_memory_budget(flags, kept.max_bytes));
  const std::string class_name = pipeline->class_name();
  const int64_t weights = static_cast<int64_t>(pipeline->resident_bytes());
  server::ModelInfo info;
  info.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_dir(flags);
  info.root = dir;
  ThreadPool pool(threads);
  server::VideoBackend backend(std::move(pipeline), pool, budget);
  server::ServerMetrics metrics(info.served_model_name, 0);
  // Requests wait in the backend's queue, each /sync one on its own HTTP thread.
  const server::ServerOptions options = server_options(flags, port, 64);
  server::HttpServer http(options, info, backend, metrics);
  char detail[256];
  std::snprintf(detail, sizeof(detail),
                "%s, /v1/videos, %d threads, weights %.2f GiB, video memory budget %.2f GiB",
                class_name.c_str(), threads, gib(weights), gib(budget));
  Status served = serve_until_signal(http, options, info, detail, signals);
  backend.shutdown();
  QS_LOG_INFO("server stopped");
  return served;
}

// transformers' test for a Whisper checkpoint: its config's model_type, or the architecture
// save_pretrained writes. A config that cannot be read is left to the LLM loader to report.
bool is_whisper_checkpoint(const std::string& dir) {
  const std::filesystem::path config = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::is_regular_file(config)) return false;
  Result<nlohmann::json> j = read_json(config.string());
  if (!j.ok()) return false;
  if (json_string_or(*j, "model_type", "") == "whisper") return true;
  const auto arch = j->find("architectures");
  if (arch == j->end() || !arch->is_array()) return false;
  for (const nlohmann::json& a : *arch) {
    if (a.is_string() && a.get<std::string>() == "WhisperForConditionalGeneration") return true;
  }
  return false;
}

// A Whisper checkpoint: the transcriber behind /v1/audio/transcriptions, one recording at a
// time on its engine thread. The LLM flags do not apply to it.
Status run_transcriber(const Flags& flags, const std::string& dir, int threads, int64_t port,
                       sigset_t* signals) {
  warn_llm_only_flags(flags, dir, "a Whisper checkpoint");
  QS_ASSIGN_OR_RETURN(audio::WhisperTranscriber whisper, audio::WhisperTranscriber::load(dir));
  server::ModelInfo info;
  info.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_dir(flags);
  info.root = dir;
  ThreadPool pool(threads);
  server::AudioBackend backend(std::move(whisper), pool);
  server::ServerMetrics metrics(info.served_model_name, 0);
  // Requests wait in the backend's queue, each on its own HTTP thread.
  server::ServerOptions options = server_options(flags, port, 64);
  QS_ASSIGN_OR_RETURN(options.max_audio_seconds, max_audio_seconds(flags));
  server::HttpServer http(options, info, backend, metrics);
  char detail[96];
  std::snprintf(detail, sizeof(detail), "Whisper, /v1/audio/transcriptions, %d threads", threads);
  Status served = serve_until_signal(http, options, info, detail, signals);
  backend.shutdown();
  QS_LOG_INFO("server stopped");
  return served;
}

Status run(const Flags& flags) {
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, model_dir(flags)));
  QS_ASSIGN_OR_RETURN(int threads, thread_count(flags));
  QS_ASSIGN_OR_RETURN(int64_t port, int_flag(flags, "port", 0, 65535));
  QS_ASSIGN_OR_RETURN(int64_t max_num_seqs, int_flag(flags, "max-num-seqs", 1, 65536));
  QS_ASSIGN_OR_RETURN(int64_t max_logprobs, int_flag(flags, "max-logprobs", 0, 1 << 20));
  // The engine thread and the HTTP threads start below: from here on SIGINT/SIGTERM are
  // taken only by sigwait() in the signal thread, never delivered to a random thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // the main thread's "stop waiting" once serving is over
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A client that hangs up must be a failed write, not a dead server.
  signal(SIGPIPE, SIG_IGN);
  if (data_parallel_requested(flags)) return run_data_parallel(flags, dir, &signals);

  const bool whisper = is_whisper_checkpoint(dir);
  if (!whisper && flags.has("max-audio-seconds"))
    QS_LOG_WARN("--max-audio-seconds applies to Whisper checkpoints only; %s is not one",
                dir.c_str());
  const bool pipeline = std::filesystem::exists(std::filesystem::path(dir) / "model_index.json");
  if ((pipeline || whisper) && flags.get("tensor-parallel-size") != "1") {
    return invalid_argument(
        "--tensor-parallel-size applies to decoder LLMs; " + dir + " is " +
        (pipeline ? "a diffusers pipeline (see --cfg-parallel-size)" : "a Whisper checkpoint"));
  }
  if (!pipeline && flags.get("cfg-parallel-size") != "1") {
    return invalid_argument("--cfg-parallel-size applies to image pipelines; " + dir +
                            " is not one (see --tensor-parallel-size)");
  }
  // What the family makes picks the server: images answer /v1/images/generations, videos
  // /v1/videos.
  const diffusion::PipelineFamilySpec* family = nullptr;
  if (pipeline) {
    QS_ASSIGN_OR_RETURN(diffusion::PipelineIndex index, diffusion::read_pipeline_index(dir));
    family = index.family;
  }
  const bool video = family != nullptr && family->output == diffusion::PipelineOutput::kVideo;
  // The video server runs one process: no rank could take a branch, whatever the family has.
  if (video && flags.get("cfg-parallel-size") != "1") {
    return invalid_argument(std::string("--cfg-parallel-size applies to image pipelines; ") + dir +
                            " is a " + family->name + " " +
                            diffusion::pipeline_output_name(family->output) + " pipeline");
  }
  if (flags.get("video-memory-budget") != "auto" && !video) {
    QS_LOG_WARN("--video-memory-budget applies to video pipelines only; %s is not one",
                dir.c_str());
  }
  if (video) return run_video_pipeline(flags, dir, threads, port, &signals);
  if (pipeline) return run_pipeline(flags, dir, threads, port, &signals);
  if (whisper) return run_transcriber(flags, dir, threads, port, &signals);
  // Under tensor parallelism every rank runs this far with the same flags; rank 0 goes on to
  // serve and the others compute their shards of its steps.
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> tp, tensor_parallel_group(flags));
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(auto model, load_tensor_parallel_model(dir, load, tp));
  if (tp != nullptr && tp->rank() != 0) return run_worker_rank(*model, threads);
  WorkerRelease release_workers(tp.get());
  QS_ASSIGN_OR_RETURN(auto tokenizer, tok::load_tokenizer(dir));
  QS_ASSIGN_OR_RETURN(io::GenerationConfig gen, io::read_generation_config(dir));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<tok::ChatTemplate> chat_template,
                      load_chat_template(flags, dir));
  const models::ModelConfig& config = model->config();
  QS_ASSIGN_OR_RETURN(MediaInputs media, load_media_inputs(dir, config));

  server::ModelInfo info;
  info.served_model_name =
      flags.has("served-model-name") ? flags.get("served-model-name") : model_dir(flags);
  info.root = dir;
  info.max_model_len = config.max_position_embeddings;
  if (flags.has("max-model-len")) {
    QS_ASSIGN_OR_RETURN(int64_t len, int_flag(flags, "max-model-len", 1, INT32_MAX));
    if (len > config.max_position_embeddings) {
      return invalid_argument("--max-model-len " + std::to_string(len) +
                              " is greater than the model's max_position_embeddings (" +
                              std::to_string(config.max_position_embeddings) + ")");
    }
    info.max_model_len = len;
  }
  info.vocab_size = config.vocab_size;
  info.tokenizer = tokenizer.get();
  info.chat_template = chat_template.get();
  info.defaults = default_params(gen);
  info.max_logprobs = static_cast<int>(max_logprobs);
  info.images = media.images.get();
  info.audio = media.clips.get();
  info.videos = media.videos.get();
  QS_ASSIGN_OR_RETURN(info.media, media_options(flags));

  engine::EngineConfig engine_config;
  engine_config.vision = media.vision.get();
  engine_config.audio = media.audio.get();
  engine_config.max_model_len = info.max_model_len;
  engine_config.max_num_seqs = max_num_seqs;
  if (flags.has("max-num-batched-tokens")) {
    QS_ASSIGN_OR_RETURN(engine_config.max_num_batched_tokens,
                        int_flag(flags, "max-num-batched-tokens", 1, INT32_MAX));
  }
  engine_config.enable_prefix_caching = !flags.has("no-enable-prefix-caching");
  QS_ASSIGN_OR_RETURN(engine_config.kv_cache_dtype, kv_cache_dtype_from_flags(flags));
  // Per rank: each holds its KV heads' share of every block.
  QS_ASSIGN_OR_RETURN(engine_config.kv_cache_bytes,
                      kv_cache_budget(flags, engine_config, model->local_config()));

  ThreadPool pool(threads);
  QS_ASSIGN_OR_RETURN(
      auto engine,
      engine::Engine::create(*model, tokenizer.get(),
                             engine::merged_eos_ids(config, gen, *tokenizer), pool, engine_config));
  server::EngineBackend backend(std::move(engine));
  server::ServerMetrics metrics(info.served_model_name, info.max_model_len);

  server::ServerOptions options = server_options(flags, port, max_num_seqs + 16);
  options.enable_prompt_tokens_details = flags.has("enable-prompt-tokens-details");
  server::HttpServer http(options, info, backend, metrics);
  char detail[96];
  std::snprintf(detail, sizeof(detail), "max_model_len %lld, %d threads%s",
                static_cast<long long>(info.max_model_len), threads,
                media.vision ? (media.audio ? ", images and audio in chat" : ", images in chat")
                             : (media.audio ? ", audio in chat" : ""));
  // A tensor-parallel rank that dies or hangs breaks the engine: in-flight requests fail with
  // 503, /health answers 503, and a second later (so that those answers go out) the job ends
  // non-zero, for mpirun or a supervisor to restart it.
  std::atomic<bool> serving{true};
  std::thread watchdog;
  if (tp != nullptr) {
    watchdog = std::thread([&backend, &serving] {
      while (serving.load() && backend.health().ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!serving.load()) return;
      QS_LOG_ERROR("tensor parallel group failed (%s); stopping the server",
                   backend.health().message().c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      if (!serving.load()) return;  // stopped meanwhile: the check after serving ends the job
      // Not a graceful stop: that would wait for idle keep-alive connections to time out
      // (httplib's 5 s), and the group can do nothing more anyway.
      std::fprintf(stderr, "quantserve serve: %s\n", backend.health().message().c_str());
      dist::abort_job(1);
    });
  }
  Status served = serve_until_signal(http, options, info, detail, &signals);
  serving.store(false);
  if (watchdog.joinable()) watchdog.join();
  backend.shutdown();
  QS_LOG_INFO("server stopped");
  if (!backend.health().ok()) {
    // The group is broken: no collective (MPI_Finalize's included) can finish. Ending the job
    // from here gives mpirun (also under --enable-recovery) a non-zero exit status.
    std::fprintf(stderr, "quantserve serve: %s\n", backend.health().message().c_str());
    dist::abort_job(1);
  }
  return served;
}

}  // namespace

int cmd_serve(const Args& args) {
  // The access log and lifecycle lines are the server's output: info unless told otherwise.
  if (std::getenv("QS_LOG_LEVEL") == nullptr) set_log_level(LogLevel::kInfo);
  Flags flags;
  flags
      .add("model",
           "checkpoint directory, a FLUX.1 or Wan2.2 diffusers pipeline directory or a Whisper "
           "checkpoint (or give it as the first argument)")
      .add("host", "address to listen on", false, "127.0.0.1")
      .add("port", "port to listen on (0: any free port, logged at start)", false, "8000")
      .add("served-model-name",
           "the model name clients send (default: MODEL as given, e.g. the repo id)")
      .add("max-model-len", "context length (default: max_position_embeddings)")
      .add("api-key", "require `Authorization: Bearer KEY` on /v1/* (default: $VLLM_API_KEY)")
      .add("chat-template", "chat template file or string (default: the checkpoint's)")
      .add("max-logprobs", "largest logprobs / top_logprobs a request may ask for", false, "20")
      .add("max-num-seqs", "requests generated together at most", false, "256")
      .add("max-num-batched-tokens", "tokens per engine step (the scheduler's budget)", false,
           "2048")
      .add("kv-cache-memory",
           "KV cache size, e.g. 4GiB (default: what max-num-seqs full-length "
           "sequences need, at most a quarter of the available memory)")
      .add("gpu-memory-utilization",
           "KV cache as this fraction of the memory available after "
           "loading (vLLM's name; on CPU it sizes the KV cache only)")
      .add("enable-prefix-caching", "reuse cached prompt prefixes (default)", true)
      .add("no-enable-prefix-caching", "disable prefix caching", true)
      .add("enable-prompt-tokens-details",
           "usage.prompt_tokens_details.cached_tokens: prompt tokens the prefix cache served", true)
      .add("limit-mm-per-prompt",
           "images, audio clips and videos one prompt may carry, as JSON: "
           "'{\"image\": 4, \"audio\": 1, \"video\": 1}' (default 16 of each)")
      .add("allowed-local-media-path",
           "a directory whose files chat requests may name as file:// image, audio or video URLs "
           "(default: none)")
      .add("video-memory-budget",
           "video pipelines (Wan2.2): the memory one video may take beyond the weights, e.g. 8GiB, "
           "or auto (what is available after loading, less a tenth and the kept MP4s); bigger "
           "requests are refused with 400",
           false, "auto")
      .add("max-audio-seconds", "Whisper: refuse recordings longer than this, from their header",
           false, "3600")
      .add("threads", "worker threads", false, std::to_string(ThreadPool::default_threads()))
      .add("cfg-parallel-size",
           "image pipelines: run the two classifier-free guidance branches on 2 ranks "
           "(mpirun -np 2)",
           false, "1")
      .add("data-parallel-size", "engine replicas behind this one endpoint", false, "1")
      .add("data-parallel-routing",
           "how requests pick a replica: prefix (the longest cached prompt prefix, else the least "
           "loaded) or round_robin",
           false, "prefix");
  add_model_flags(flags);
  add_kv_cache_dtype_flag(flags);
  add_tensor_parallel_flags(flags);
  // run_command rejects positional arguments; serve takes the model as one.
  Status parsed = flags.parse(args);
  if (parsed.ok() && flags.help_requested()) {
    std::printf("%s", flags.usage(kUsageLine).c_str());
    return 0;
  }
  if (parsed.ok()) parsed = check_flag_values(flags);
  if (!parsed.ok()) {
    std::fprintf(stderr, "quantserve serve: %s\n\n%s", parsed.message().c_str(),
                 flags.usage(kUsageLine).c_str());
    return 2;
  }
  if (Status s = run(flags); !s.ok()) {
    std::fprintf(stderr, "quantserve serve: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
