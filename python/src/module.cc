// python: the extension module quantserve._core. It binds LlmCore (the engine behind
// quantserve.LLM), its tokenizer and chat template, and the engine's per-step outputs; the
// vLLM-shaped API (LLM, SamplingParams, RequestOutput) is Python, in python/quantserve/.
// Every failure a caller or a file can cause comes back as a quantserve.Error (py_status.h);
// the engine's work (loading, each step) runs with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <optional>

#include "core/thread_pool.h"
#include "diffusion_bindings.h"
#include "eval_bindings.h"
#include "llm_core.h"
#include "py_status.h"
#include "quantize_bindings.h"
#include "sampling_dict.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace qs::py {
namespace {

// Text as Python str. The engine's text is UTF-8 by construction (the detokenizer holds back
// incomplete sequences), but a byte-level model can still emit invalid bytes at the end of a
// request: those become U+FFFD, as transformers' decode does.
nb::str utf8(const std::string& s) {
  return nb::steal<nb::str>(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
}

// A JSON text made by Python's json.dumps, as the ordered JSON the chat template renders.
nlohmann::ordered_json parse_json(const std::string& text, const char* what) {
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(text, nullptr, false);
  if (value.is_discarded()) throw_status(invalid_argument(std::string(what) + " is not JSON"));
  return value;
}

void check_ids(const LlmCore& core, const std::vector<int32_t>& ids) {
  const int32_t vocab = core.tokenizer().vocab_size();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw_status(invalid_argument("token id " + std::to_string(id) +
                                    " is outside the tokenizer's vocabulary [0, " +
                                    std::to_string(vocab) + ")"));
    }
  }
}

std::unique_ptr<LlmCore> load_core(const LlmOptions& options) {
  std::optional<Result<std::unique_ptr<LlmCore>>> loaded;
  without_gil(
      "loading the model and allocating its KV cache (lower max_model_len, max_num_seqs or "
      "kv_cache_memory_bytes)",
      [&] { loaded.emplace(LlmCore::load(options)); });
  return value_or_throw(std::move(*loaded));
}

void bind_step_output(nb::module_& m) {
  nb::class_<engine::RequestOutput>(m, "StepOutput",
                                    "What one request produced in one engine step.")
      .def_ro("request_id", &engine::RequestOutput::id)
      .def_ro("new_token_ids", &engine::RequestOutput::new_token_ids)
      .def_prop_ro("new_text", [](const engine::RequestOutput& o) { return utf8(o.new_text); })
      .def_ro("finished", &engine::RequestOutput::finished)
      .def_ro("finish_reason", &engine::RequestOutput::finish_reason)
      .def_ro("stop_token_id", &engine::RequestOutput::stop_token_id)
      .def_ro("stop_string", &engine::RequestOutput::stop_string)
      .def_ro("num_prompt_tokens", &engine::RequestOutput::num_prompt_tokens)
      .def_ro("num_cached_tokens", &engine::RequestOutput::num_cached_tokens)
      // One (sampled id, its logprob, [(id, logprob), ...] best first) per new token.
      .def_prop_ro("logprobs",
                   [](const engine::RequestOutput& o) {
                     nb::list out;
                     for (const engine::SampleLogprobs& s : o.logprobs) {
                       nb::list top;
                       for (const engine::TokenLogprob& t : s.top) {
                         top.append(nb::make_tuple(t.token, t.logprob));
                       }
                       out.append(nb::make_tuple(s.sampled.token, s.sampled.logprob, top));
                     }
                     return out;
                   })
      // The request's failure as the exception to raise, or None.
      .def_prop_ro("error", [](const engine::RequestOutput& o) -> nb::object {
        if (o.error.ok()) return nb::none();
        return status_exception(o.error);
      });
}

void bind_core(nb::module_& m) {
  nb::class_<LlmCore>(m, "LlmCore")
      .def_static(
          "load",
          [](const std::string& model, const std::string& revision, const std::string& quantization,
             const std::string& kv_cache_dtype, int64_t max_model_len, int64_t max_num_seqs,
             int64_t max_num_batched_tokens, bool enable_prefix_caching, int threads,
             std::optional<int64_t> kv_cache_memory_bytes, std::optional<double> memory_fraction,
             const std::string& lm_head_dtype, const std::string& device) {
            LlmOptions o;
            o.model = model;
            o.revision = revision;
            o.quantization = quantization;
            o.kv_cache_dtype = kv_cache_dtype;
            o.max_model_len = max_model_len;
            o.max_num_seqs = max_num_seqs;
            o.max_num_batched_tokens = max_num_batched_tokens;
            o.enable_prefix_caching = enable_prefix_caching;
            o.threads = threads;
            o.kv_cache_memory_bytes = kv_cache_memory_bytes;
            o.memory_fraction = memory_fraction;
            o.lm_head_dtype = lm_head_dtype;
            o.device = device;
            return load_core(o);
          },
          "model"_a, "revision"_a, "quantization"_a, "kv_cache_dtype"_a, "max_model_len"_a,
          "max_num_seqs"_a, "max_num_batched_tokens"_a, "enable_prefix_caching"_a, "threads"_a,
          "kv_cache_memory_bytes"_a.none(), "memory_fraction"_a.none(), "lm_head_dtype"_a = "auto",
          "device"_a = "auto")
      .def(
          "add_request",
          [](LlmCore& core, const std::string& id, std::vector<int32_t> prompt_ids,
             nb::handle params) {
            engine::EngineRequest request;
            request.id = id;
            request.prompt_ids = std::move(prompt_ids);
            request.params = value_or_throw(sampling_params_from_dict(params));
            check_ok(without_gil("adding a request",
                                 [&] { return core.add_request(std::move(request)); }));
          },
          "request_id"_a, "prompt_token_ids"_a, "params"_a)
      .def("step",
           [](LlmCore& core) {
             return without_gil("running an engine step (lower max_num_batched_tokens)",
                                [&] { return core.step(); });
           })
      .def("abort", &LlmCore::abort, nb::call_guard<nb::gil_scoped_release>())
      .def("has_unfinished", &LlmCore::has_unfinished, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "encode",
          [](const LlmCore& core, const std::string& text, bool add_special_tokens) {
            return core.tokenizer().encode(text, add_special_tokens);
          },
          "text"_a, "add_special_tokens"_a = true)
      .def(
          "decode",
          [](const LlmCore& core, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            check_ids(core, ids);
            return utf8(core.tokenizer().decode(ids, skip_special_tokens));
          },
          "ids"_a, "skip_special_tokens"_a = true)
      .def(
          "id_to_piece",
          [](const LlmCore& core, int32_t id) {
            check_ids(core, {id});
            return utf8(core.tokenizer().id_to_piece(id));
          },
          "id"_a)
      .def(
          "render_chat",
          [](const LlmCore& core, const std::string& messages_json, bool add_generation_prompt,
             bool continue_final_message, std::optional<std::string> chat_template,
             const std::string& kwargs_json) {
            return utf8(value_or_throw(
                core.render_chat(parse_json(messages_json, "messages"), add_generation_prompt,
                                 continue_final_message, chat_template,
                                 parse_json(kwargs_json, "chat_template_kwargs"))));
          },
          "messages_json"_a, "add_generation_prompt"_a, "continue_final_message"_a,
          "chat_template"_a.none(), "kwargs_json"_a)
      // generation_config.json's sampling fields that it sets, with vLLM's names.
      .def("generation_defaults",
           [](const LlmCore& core) {
             const io::GenerationConfig& g = core.generation_config();
             nb::dict d;
             if (g.temperature) d["temperature"] = *g.temperature;
             if (g.top_p) d["top_p"] = *g.top_p;
             if (g.top_k) d["top_k"] = *g.top_k;
             if (g.repetition_penalty) d["repetition_penalty"] = *g.repetition_penalty;
             if (g.max_new_tokens) d["max_tokens"] = *g.max_new_tokens;
             return d;
           })
      .def_prop_ro("bos_token_id", [](const LlmCore& c) { return c.tokenizer().bos_id(); })
      .def_prop_ro("eos_token_id", [](const LlmCore& c) { return c.tokenizer().eos_id(); })
      .def_prop_ro("bos_token", [](const LlmCore& c) { return utf8(c.tokenizer().bos_token()); })
      .def_prop_ro("eos_token", [](const LlmCore& c) { return utf8(c.tokenizer().eos_token()); })
      .def_prop_ro("tokenizer_vocab_size",
                   [](const LlmCore& c) { return c.tokenizer().vocab_size(); })
      .def_prop_ro("vocab_size", &LlmCore::vocab_size)
      .def_prop_ro("max_model_len", &LlmCore::max_model_len)
      .def_prop_ro("model_dir", &LlmCore::model_dir)
      .def_prop_ro("eos_ids", &LlmCore::eos_ids)
      .def_prop_ro("threads", &LlmCore::threads);
}

}  // namespace
}  // namespace qs::py

NB_MODULE(_core, m) {
  m.doc() = "quantserve's engine; use the quantserve package (quantserve.LLM) instead.";
  qs::py::bind_step_output(m);
  qs::py::bind_core(m);
  qs::py::bind_diffusion(m);  // quantserve.Omni
  qs::py::bind_quantize(m);   // quantserve.AutoRound
  qs::py::bind_eval(m);       // quantserve.evaluate
  // SamplingParams' value checks, the engine's own (vLLM's messages), run when one is made:
  // token ids are checked against the vocabulary later, when a request is added.
  m.def(
      "check_sampling_params",
      [](nb::handle params) {
        qs::SamplingParams p = qs::py::value_or_throw(qs::py::sampling_params_from_dict(params));
        qs::py::check_ok(p.validate(INT32_MAX));
      },
      "params"_a);
  m.def("default_threads", &qs::ThreadPool::default_threads);
}
