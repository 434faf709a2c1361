// python: QuantizeSetup (see quantize_bindings.h).
#include "quantize_bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/thread_pool.h"
#include "interrupt_poll.h"
#include "io/hf_cache.h"
#include "io/quant_export.h"
#include "py_status.h"
#include "quant/pipeline.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace qs::py {
namespace {

// AutoRound's constructor arguments as `quantserve quantize`'s flags carry them: an optional
// here is a flag the user may leave out, and leaving it out means what it means there.
struct QuantizeArgs {
  std::string model, revision, scheme;
  std::optional<int64_t> bits, group_size, iters, threads;
  std::optional<bool> sym;
  int64_t nsamples = 0, seqlen = 0, batch_size = 0, gradient_accumulate_steps = 0;
  uint64_t seed = 0;
  std::optional<double> lr, minmax_lr;
  std::string dataset;
  std::optional<std::string> layer_config;  // JSON text, or a file holding it
  bool quant_lm_head = false, disable_opt_rtn = false, disable_amp = false;
};

// The options struct as cmd_quantize.cc's options_from_flags fills it, step for step and with
// its messages (spelt with auto-round's argument names), less the output location and format,
// which quantize_and_save gives.
Result<quant::QuantizeOptions> options_from_args(const QuantizeArgs& a) {
  quant::QuantizeOptions o;
  QS_ASSIGN_OR_RETURN(o.model_dir, io::resolve_model_dir(a.model, a.revision));
  QS_ASSIGN_OR_RETURN(o.spec, quant::parse_scheme(a.scheme));
  const bool w8a8 = o.spec.needs_compressed_tensors();
  if (w8a8 && (a.bits || a.group_size || a.sym == false)) {
    return invalid_argument("scheme " + a.scheme +
                            " is a fixed preset: bits, group_size and sym=False do not apply");
  }
  if (a.bits) o.spec.bits = static_cast<int>(*a.bits);
  if (a.group_size) o.spec.group_size = *a.group_size;
  if (a.sym == false) o.spec.sym = false;
  // The W8A8 / FP8 presets exist in compressed-tensors only, and are RTN there.
  o.format = w8a8 ? io::ExportFormat::kCompressedTensors : io::ExportFormat::kAutoRound;
  o.iters = a.iters.value_or(200);
  o.nsamples = a.nsamples;
  o.seqlen = a.seqlen;
  o.batch_size = a.batch_size;
  o.seed = a.seed;
  if (a.lr) o.lr = *a.lr;
  if (a.minmax_lr) o.minmax_lr = *a.minmax_lr;
  o.gradient_accumulate_steps = a.gradient_accumulate_steps;
  o.threads = static_cast<int>(a.threads.value_or(ThreadPool::default_threads()));
  o.dataset = a.dataset;
  o.quant_lm_head = a.quant_lm_head;
  o.disable_opt_rtn = a.disable_opt_rtn;
  o.amp = !a.disable_amp;
  if (w8a8 && !a.iters) {
    o.iters = 0;
    o.disable_opt_rtn = true;
  }
  if (a.layer_config) {
    // Inline JSON, or a file holding it (the Python side passes a dict as JSON text).
    const std::string& v = *a.layer_config;
    if (!v.empty() && v[0] == '{') {
      o.layer_config = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
      if (o.layer_config.is_discarded()) return invalid_argument("layer_config: not valid JSON");
    } else {
      QS_ASSIGN_OR_RETURN(o.layer_config, read_json(v));
    }
  }
  return o;
}

class QuantizeSetup {
 public:
  explicit QuantizeSetup(quant::QuantizeOptions options) : options_(std::move(options)) {}

  // quant::quantize into `output_dir`; `format` empty keeps the scheme's default format.
  Result<quant::QuantizeSummary> run(const std::string& output_dir, const std::string& format,
                                     bool overwrite, InterruptPoll& interrupted) const {
    quant::QuantizeOptions o = options_;
    o.output_dir = output_dir;
    o.overwrite = overwrite;
    if (!format.empty()) {
      QS_ASSIGN_OR_RETURN(o.format, io::parse_export_format(format));
    }
    return quant::quantize(
        o, [](int64_t, int64_t) {}, [&interrupted] { return interrupted(); },
        [](const quant::BlockReport&) {});
  }

  const quant::QuantizeOptions& options() const { return options_; }

 private:
  quant::QuantizeOptions options_;
};

nb::dict summary_dict(const quant::QuantizeSummary& s) {
  nb::dict d;
  d["scheme"] = s.scheme;
  d["n_quantized"] = s.n_quantized;
  nb::list kept;
  for (const auto& [module, reason] : s.kept) kept.append(nb::make_tuple(module, reason));
  d["kept"] = kept;
  d["bytes_before"] = s.bytes_before;
  d["bytes_after"] = s.bytes_after;
  d["seconds"] = s.seconds;
  d["calibration"] = s.calibration;
  nb::list blocks;
  for (const quant::BlockReport& b : s.blocks) {
    nb::dict r;
    r["layer"] = b.layer.empty() ? "block " + std::to_string(b.index) : b.layer;
    r["iters"] = b.iters;
    r["initial_loss"] = b.initial_loss;
    r["best_loss"] = b.best_loss;
    r["best_iter"] = b.best_iter;
    r["seconds"] = b.seconds;
    blocks.append(r);
  }
  d["blocks"] = blocks;
  nb::list unrouted;
  for (const std::string& e : s.unrouted) unrouted.append(e);
  d["unrouted"] = unrouted;
  d["table"] = quant::format_summary(s);  // what the command prints after "quantized A into B"
  return d;
}

}  // namespace

void bind_quantize(nb::module_& m) {
  nb::class_<QuantizeSetup>(m, "QuantizeSetup")
      .def_static(
          "create",
          [](const std::string& model, const std::string& revision, const std::string& scheme,
             std::optional<int64_t> bits, std::optional<int64_t> group_size,
             std::optional<bool> sym, std::optional<int64_t> iters, int64_t nsamples,
             int64_t seqlen, int64_t batch_size, int64_t gradient_accumulate_steps, uint64_t seed,
             std::optional<double> lr, std::optional<double> minmax_lr,
             std::optional<int64_t> threads, const std::string& dataset,
             std::optional<std::string> layer_config, bool quant_lm_head, bool disable_opt_rtn,
             bool disable_amp) {
            QuantizeArgs a;
            a.model = model;
            a.revision = revision;
            a.scheme = scheme;
            a.bits = bits;
            a.group_size = group_size;
            a.sym = sym;
            a.iters = iters;
            a.nsamples = nsamples;
            a.seqlen = seqlen;
            a.batch_size = batch_size;
            a.gradient_accumulate_steps = gradient_accumulate_steps;
            a.seed = seed;
            a.lr = lr;
            a.minmax_lr = minmax_lr;
            a.threads = threads;
            a.dataset = dataset;
            a.layer_config = layer_config;
            a.quant_lm_head = quant_lm_head;
            a.disable_opt_rtn = disable_opt_rtn;
            a.disable_amp = disable_amp;
            return QuantizeSetup(value_or_throw(options_from_args(a)));
          },
          "model"_a, "revision"_a, "scheme"_a, "bits"_a.none(), "group_size"_a.none(),
          "sym"_a.none(), "iters"_a.none(), "nsamples"_a, "seqlen"_a, "batch_size"_a,
          "gradient_accumulate_steps"_a, "seed"_a, "lr"_a.none(), "minmax_lr"_a.none(),
          "threads"_a.none(), "dataset"_a, "layer_config"_a.none(), "quant_lm_head"_a,
          "disable_opt_rtn"_a, "disable_amp"_a)
      .def(
          "run",
          [](const QuantizeSetup& setup, const std::string& output_dir, const std::string& format,
             bool overwrite) {
            InterruptPoll interrupted;
            std::optional<Result<quant::QuantizeSummary>> summary;
            without_gil("quantizing (lower nsamples, seqlen or batch_size)", [&] {
              summary.emplace(setup.run(output_dir, format, overwrite, interrupted));
            });
            // A Ctrl-C stopped the run, which removed its staging directory: raise that.
            interrupted.raise_if_interrupted();
            return summary_dict(value_or_throw(std::move(*summary)));
          },
          "output_dir"_a, "format"_a, "overwrite"_a)
      // What the settings resolved to (AutoRound's bits, group_size, sym, iters).
      .def_prop_ro("bits", [](const QuantizeSetup& s) { return s.options().spec.bits; })
      .def_prop_ro("group_size", [](const QuantizeSetup& s) { return s.options().spec.group_size; })
      .def_prop_ro("sym", [](const QuantizeSetup& s) { return s.options().spec.sym; })
      .def_prop_ro("iters", [](const QuantizeSetup& s) { return s.options().iters; });
}

}  // namespace qs::py
