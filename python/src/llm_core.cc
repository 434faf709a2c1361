// python: the engine behind quantserve.LLM (see llm_core.h).
#include "llm_core.h"

#include "engine/eos_ids.h"
#include "engine/kv_cache.h"
#include "engine/memory_budget.h"
#include "io/hf_cache.h"
#include "ops/backend.h"
#include "server/chat_content.h"

namespace qs::py {

Result<std::unique_ptr<LlmCore>> LlmCore::load(const LlmOptions& o) {
  if (o.model.empty()) return invalid_argument("model is required");
  if (o.max_num_seqs < 1 || o.max_num_seqs > 65536) {
    return invalid_argument("max_num_seqs must be in [1, 65536], got " +
                            std::to_string(o.max_num_seqs));
  }
  if (o.threads < 0 || o.threads > 1024) {
    return invalid_argument("threads must be in [1, 1024], got " + std::to_string(o.threads));
  }
  QS_ASSIGN_OR_RETURN(const DType cache_dtype, engine::parse_kv_cache_dtype(o.kv_cache_dtype));
  std::unique_ptr<LlmCore> core(new LlmCore());
  QS_ASSIGN_OR_RETURN(core->dir_, io::resolve_model_dir(o.model, o.revision));
  models::LoadOptions load;
  load.quantization = o.quantization;
  load.lm_head_dtype = o.lm_head_dtype;
  auto device = ops::resolve_device(o.device);
  if (!device.ok()) return device.status().with_context("device");
  load.device = *device;
  QS_ASSIGN_OR_RETURN(core->model_, models::Model::load(core->dir_, load));
  QS_ASSIGN_OR_RETURN(core->tokenizer_, tok::load_tokenizer(core->dir_));
  QS_ASSIGN_OR_RETURN(core->gen_, io::read_generation_config(core->dir_));
  Result<tok::ChatTemplate> chat = tok::ChatTemplate::from_model_dir(core->dir_);
  if (chat.ok()) {
    core->chat_template_ = std::make_unique<tok::ChatTemplate>(std::move(*chat));
  } else if (chat.status().code() != StatusCode::kNotFound) {
    return chat.status();  // a template that is there but does not parse
  }
  const models::ModelConfig& config = core->model_->config();
  core->eos_ids_ = engine::merged_eos_ids(config, core->gen_, *core->tokenizer_);

  engine::EngineConfig e;
  e.max_model_len = config.max_position_embeddings;
  if (o.max_model_len != 0) {
    if (o.max_model_len < 1 || o.max_model_len > config.max_position_embeddings) {
      return invalid_argument("max_model_len " + std::to_string(o.max_model_len) +
                              " must be in [1, " + std::to_string(config.max_position_embeddings) +
                              "] (the model's max_position_embeddings)");
    }
    e.max_model_len = o.max_model_len;
  }
  e.max_num_seqs = o.max_num_seqs;
  if (o.max_num_batched_tokens != 0) {
    if (o.max_num_batched_tokens < 1) {
      return invalid_argument("max_num_batched_tokens must be positive, got " +
                              std::to_string(o.max_num_batched_tokens));
    }
    e.max_num_batched_tokens = o.max_num_batched_tokens;
  }
  e.enable_prefix_caching = o.enable_prefix_caching;
  e.kv_cache_dtype = cache_dtype;
  // serve's sizing, from vLLM's keywords here (its flags there).
  if (o.kv_cache_memory_bytes && *o.kv_cache_memory_bytes < 1) {
    return invalid_argument("kv_cache_memory_bytes must be positive, got " +
                            std::to_string(*o.kv_cache_memory_bytes));
  }
  engine::ServingKvCacheSize size;
  size.bytes = o.kv_cache_memory_bytes;
  if (!size.bytes) size.memory_fraction = o.memory_fraction;
  size.max_model_len = e.max_model_len;
  size.max_num_seqs = e.max_num_seqs;
  size.block_size = e.block_size;
  size.cache_dtype = e.kv_cache_dtype;
  QS_ASSIGN_OR_RETURN(e.kv_cache_bytes, engine::serving_kv_cache_bytes(config, size));
  core->pool_ =
      std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : ThreadPool::default_threads());
  QS_ASSIGN_OR_RETURN(core->engine_, engine::Engine::create(*core->model_, core->tokenizer_.get(),
                                                            core->eos_ids_, *core->pool_, e));
  return core;
}

Status LlmCore::add_request(engine::EngineRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->add_request(std::move(request));
}

std::vector<engine::RequestOutput> LlmCore::step() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->step();
}

void LlmCore::abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_->abort(id);
}

bool LlmCore::has_unfinished() {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->has_unfinished();
}

Result<std::string> LlmCore::render_chat(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt, bool continue_final_message,
                                         const std::optional<std::string>& template_source,
                                         const nlohmann::ordered_json& template_kwargs) const {
  // As vLLM's LLM.chat and serve's --chat-template: a file, or the template itself.
  std::unique_ptr<tok::ChatTemplate> given;
  if (template_source) {
    QS_ASSIGN_OR_RETURN(tok::ChatTemplate t,
                        tok::ChatTemplate::from_file_or_string(*template_source));
    given = std::make_unique<tok::ChatTemplate>(std::move(t));
  }
  const tok::ChatTemplate* chat = given ? given.get() : chat_template_.get();
  if (chat == nullptr) {
    // vLLM's message for a tokenizer without a template.
    return invalid_argument(
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.");
  }
  if (!messages.is_array() || messages.empty()) {
    return invalid_argument("messages must be a non-empty list of messages");
  }
  if (continue_final_message && add_generation_prompt) {
    return invalid_argument(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  server::ChatMessages parsed;
  if (auto e = server::parse_chat_messages(
          messages, server::template_iterates_content(chat->source()), {}, &parsed)) {
    return invalid_argument(e->message);
  }
  if (!parsed.image_urls.empty() || !parsed.audio_urls.empty() || !parsed.video_urls.empty()) {
    return invalid_argument(
        "messages: LLM.chat takes text parts only for now; image, audio and video parts go "
        "through `quantserve generate --image/--audio/--video` or the server's chat endpoint");
  }
  QS_ASSIGN_OR_RETURN(std::string text,
                      chat->render(parsed.messages, add_generation_prompt, template_kwargs));
  if (continue_final_message) {
    // The final message is left open: drop what the template wrote after it (as serve).
    const std::string& last = parsed.final_text;
    const size_t pos = last.empty() ? std::string::npos : text.rfind(last);
    if (pos != std::string::npos) text.resize(pos + last.size());
  }
  return text;
}

}  // namespace qs::py
