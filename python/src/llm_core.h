// python: the engine behind quantserve.LLM, in plain C++ (no Python types): one loaded model,
// its tokenizer, chat template and generation_config.json, and one engine::Engine over a KV
// cache sized as `serve` sizes it. Requests from any number of LLM.generate / chat / stream
// calls share the engine (continuous batching); the Python side routes step() outputs back to
// its calls by request id. Every call takes the core's own lock, so the bindings can run the
// engine with the GIL released while another Python thread uses the same LLM.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "io/generation_config.h"
#include "models/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::py {

// quantserve.LLM's constructor arguments, with vLLM's names.
struct LlmOptions {
  std::string model;         // a directory, or a Hugging Face repo id found in the hub cache
  std::string revision;      // of a repo id (empty: main)
  std::string quantization;  // empty: detect (vLLM's quantization=None)
  std::string kv_cache_dtype = "auto";
  std::string lm_head_dtype = "auto";  // "int8": a 16-bit lm_head made int8 per row at load
  std::string device = "auto";         // cpu, cuda, cuda:N, auto (ops::resolve_device)
  int64_t max_model_len = 0;           // 0: the model's max_position_embeddings
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 0;  // 0: the engine's default
  bool enable_prefix_caching = true;
  int threads = 0;  // 0: ThreadPool::default_threads()
  // The KV cache: exactly these bytes, else this fraction of the memory available after
  // loading (vLLM's gpu_memory_utilization), else what max_num_seqs sequences of
  // max_model_len need, capped at a quarter of the available memory (serve's default).
  std::optional<int64_t> kv_cache_memory_bytes;
  std::optional<double> memory_fraction;
};

class LlmCore {
 public:
  static Result<std::unique_ptr<LlmCore>> load(const LlmOptions& options);

  // engine::Engine's, under the core's lock.
  Status add_request(engine::EngineRequest request);
  std::vector<engine::RequestOutput> step();
  void abort(const std::string& id);
  bool has_unfinished();

  // `messages` (a list of OpenAI chat messages, content a string or a list of text parts)
  // through the chat template as the server's chat endpoint renders them: `template_source`
  // when given, else the checkpoint's. Image, audio and video parts are refused for now.
  Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                  bool add_generation_prompt, bool continue_final_message,
                                  const std::optional<std::string>& template_source,
                                  const nlohmann::ordered_json& template_kwargs) const;

  // generation_config.json: its sampling fields are what LLM.generate uses when it is given
  // no parameters (vLLM's get_default_sampling_params).
  const io::GenerationConfig& generation_config() const { return gen_; }

  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& model_dir() const { return dir_; }
  int64_t max_model_len() const { return engine_->config().max_model_len; }
  int64_t vocab_size() const { return model_->config().vocab_size; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  int threads() const { return pool_->n_threads(); }

 private:
  LlmCore() = default;

  std::string dir_;
  std::unique_ptr<models::Model> model_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  io::GenerationConfig gen_;
  std::unique_ptr<tok::ChatTemplate> chat_template_;  // null: the checkpoint has none
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<engine::Engine> engine_;
  std::mutex mu_;  // the engine is not thread-safe
};

}  // namespace qs::py
