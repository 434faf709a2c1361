// python: run_eval (see eval_bindings.h), its request filled in as cmd_eval.cc fills it.
#include "eval_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <utility>

#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "eval/eval_run.h"
#include "io/hf_cache.h"
#include "py_status.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace qs::py {
namespace {

struct EvalArgs {
  std::string model, reference, revision, dataset, quantization;
  std::string kv_cache_dtype, reference_kv_cache_dtype;
  int64_t seqlen = 0, max_tokens = 0;
  std::optional<int64_t> threads;
};

// The checks of cmd_eval.cc's check() and the request of its run(), in that order, with the
// GIL released by the caller: the JSON of the run as `eval --json -` prints it (dump(2)).
Result<std::string> eval_json(const EvalArgs& a) {
  QS_ASSIGN_OR_RETURN(const DType cache_dtype, engine::parse_kv_cache_dtype(a.kv_cache_dtype));
  QS_ASSIGN_OR_RETURN(const DType reference_cache_dtype,
                      engine::parse_kv_cache_dtype(a.reference_kv_cache_dtype));
  eval::EvalRequest req;
  QS_ASSIGN_OR_RETURN(req.model_dir, io::resolve_model_dir(a.model, a.revision));
  if (!a.reference.empty()) {
    QS_ASSIGN_OR_RETURN(req.reference_dir, io::resolve_model_dir(a.reference, a.revision));
  }
  req.dataset = a.dataset.empty() ? eval::default_eval_dataset() : a.dataset;
  req.seqlen = a.seqlen;
  req.max_tokens = a.max_tokens;
  req.threads = static_cast<int>(a.threads.value_or(ThreadPool::default_threads()));
  req.load.quantization = a.quantization;
  req.kv_cache_dtype = cache_dtype;
  req.reference_kv_cache_dtype = reference_cache_dtype;
  QS_ASSIGN_OR_RETURN(nlohmann::json result, eval::run_eval(req));
  return result.dump(2);
}

}  // namespace

void bind_eval(nb::module_& m) {
  m.def(
      "run_eval",
      [](const std::string& model, const std::string& reference, const std::string& revision,
         const std::string& dataset, int64_t seqlen, int64_t max_tokens,
         std::optional<int64_t> threads, const std::string& quantization,
         const std::string& kv_cache_dtype, const std::string& reference_kv_cache_dtype) {
        EvalArgs a;
        a.model = model;
        a.reference = reference;
        a.revision = revision;
        a.dataset = dataset;
        a.seqlen = seqlen;
        a.max_tokens = max_tokens;
        a.threads = threads;
        a.quantization = quantization;
        a.kv_cache_dtype = kv_cache_dtype;
        a.reference_kv_cache_dtype = reference_kv_cache_dtype;
        std::optional<Result<std::string>> json;
        without_gil("evaluating (lower seqlen)", [&] { json.emplace(eval_json(a)); });
        return value_or_throw(std::move(*json));
      },
      "model"_a, "reference"_a, "revision"_a, "dataset"_a, "seqlen"_a, "max_tokens"_a,
      "threads"_a.none(), "quantization"_a, "kv_cache_dtype"_a, "reference_kv_cache_dtype"_a);
  m.def("default_eval_dataset", &eval::default_eval_dataset);
}

}  // namespace qs::py
