// apps: bench matrix's plan (see bench_matrix_plan.h).
#include "apps/bench_matrix_plan.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/bench_commands.h"
#include "core/json.h"
#include "io/checkpoint.h"
#include "io/hf_cache.h"

namespace qs::apps::matrix {
namespace {

namespace fs = std::filesystem;

// serve's --kv-cache-memory spelling: bytes with an optional K/M/G or KiB/MiB/GiB suffix.
Result<int64_t> parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string suffix(end);
  double scale = 0;
  if (suffix.empty() || suffix == "B") scale = 1;
  if (suffix == "K" || suffix == "KiB") scale = 1024.0;
  if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  if (end == text.c_str() || !(v > 0) || scale == 0) {
    return invalid_argument("--kv-cache-memory expects sizes like 32MiB, 1GiB or 512M, got '" +
                            text + "'");
  }
  return static_cast<int64_t>(v * scale);
}

// make-model writes config.json, a bare generation_config.json (only _from_model_config and
// the bos/eos ids) and one model.safetensors; a checkpoint saved by transformers carries at
// least transformers_version there. The check after making (same_random_weights) decides.
bool looks_made_by_make_model(const std::string& dir) {
  if (!fs::exists(dir + "/model.safetensors") || fs::exists(dir + "/model.safetensors.index.json"))
    return false;
  Result<nlohmann::json> gen = read_json(dir + "/generation_config.json");
  if (!gen.ok() || !gen->is_object() || gen->value("_from_model_config", false) != true)
    return false;
  for (const auto& [key, value] : gen->items()) {
    if (key != "_from_model_config" && key != "bos_token_id" && key != "eos_token_id") return false;
  }
  return true;
}

Result<Scheme> parse_scheme(const std::string& entry, const std::string& model_dir) {
  Scheme s;
  s.name = entry;
  std::string base = entry;
  if (base.size() > std::strlen(kFp8KvSuffix) && base.ends_with(kFp8KvSuffix)) {
    s.fp8_kv = true;
    base.resize(base.size() - std::strlen(kFp8KvSuffix));
  }
  if (base == "bf16") {
    s.weights = base;
    s.source = Source::kReference;
    s.dir = model_dir;
    return s;
  }
  if (base.find('/') != std::string::npos) {
    std::string path = base;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    if (!fs::is_regular_file(path + "/config.json")) {
      return invalid_argument("--schemes: '" + base + "' is not a checkpoint directory (no " +
                              path + "/config.json)");
    }
    s.weights = fs::path(path).filename().string();
    s.source = Source::kDirectory;
    s.dir = path;
    return s;
  }
  if (base.find('+') != std::string::npos) {
    return invalid_argument("--schemes: unknown suffix in '" + entry + "' (the only one is " +
                            kFp8KvSuffix + "); " + kSchemeHelp);
  }
  Result<io::IntQuantSpec> spec = io::parse_int_quant_spec(base);
  if (!spec.ok()) {
    return invalid_argument("--schemes: unknown scheme '" + base + "' (" + spec.status().message() +
                            "); " + kSchemeHelp);
  }
  s.weights = io::int_quant_spec_name(*spec);
  s.source = Source::kMake;
  s.spec = *spec;
  return s;
}

}  // namespace

const char* const kSchemeHelp =
    "an entry is bf16 (the --model directory itself), a checkpoint directory (a path with a "
    "'/', e.g. ./qwen-awq), or a scheme to make from --model: w4g128, w4g32, w4g128-asym, w8, "
    "w8g128, w3g128, w2g64, ... (w<bits>[g<group>][-asym]), w8a8, fp8, fp8-block; any entry "
    "may end in +fp8kv (served with --kv-cache-dtype fp8)";

// The whole invocation checked before anything runs: lists, spellings, directories, and
// whether each made scheme can be made from --model.
Result<Plan> make_plan(const Flags& flags) {
  Plan p;
  if (!flags.has("model"))
    return invalid_argument("--model DIR (the unquantized model) is required");
  // A repo id resolves offline in the Hugging Face cache, as in every command that loads one.
  QS_ASSIGN_OR_RETURN(p.model_dir, io::resolve_model_dir(flags.get("model")));
  while (p.model_dir.size() > 1 && p.model_dir.back() == '/') p.model_dir.pop_back();
  QS_ASSIGN_OR_RETURN(nlohmann::json config, read_json(p.model_dir + "/config.json"));
  if (config.contains("quantization_config") ||
      fs::exists(p.model_dir + "/quantization_config.json")) {
    return invalid_argument("--model " + p.model_dir +
                            " is quantized; it must be the unquantized reference (give quantized "
                            "checkpoints in --schemes as directories)");
  }
  QS_ASSIGN_OR_RETURN(auto entries, flags.get_list("schemes"));
  std::set<std::string> seen;
  for (const std::string& e : entries) {
    QS_ASSIGN_OR_RETURN(Scheme s, parse_scheme(e, p.model_dir));
    if (!seen.insert(s.weights + (s.fp8_kv ? kFp8KvSuffix : "")).second) {
      return invalid_argument("--schemes names '" + e + "' twice");
    }
    p.schemes.push_back(std::move(s));
  }
  QS_ASSIGN_OR_RETURN(auto budgets, flags.get_list("kv-cache-memory"));
  std::set<int64_t> seen_bytes;
  for (const std::string& b : budgets) {
    QS_ASSIGN_OR_RETURN(int64_t bytes, parse_bytes(b));
    if (!seen_bytes.insert(bytes).second) {
      return invalid_argument("--kv-cache-memory names " + b + " twice");
    }
    p.budgets.push_back({b, bytes});
  }
  QS_ASSIGN_OR_RETURN(auto conc, flags.get_list("max-concurrency"));
  for (const std::string& c : conc) {
    char* end = nullptr;
    const long long v = std::strtoll(c.c_str(), &end, 10);
    if (*end != '\0' || v < 1) {
      return invalid_argument("--max-concurrency expects positive integers, got '" + c + "'");
    }
    p.concurrencies.push_back(v);
  }

  const std::string maker = flags.get("quantizer");
  const bool made_by_make_model = looks_made_by_make_model(p.model_dir);
  if (maker == "auto") {
    p.maker = made_by_make_model ? Maker::kMakeModel : Maker::kQuantize;
  } else if (maker == "make-model") {
    p.maker = Maker::kMakeModel;
  } else if (maker == "quantize") {
    p.maker = Maker::kQuantize;
  } else {
    return invalid_argument("--quantizer must be auto, make-model or quantize, got '" + maker +
                            "'");
  }
  for (const Scheme& s : p.schemes) {
    if (s.source != Source::kMake || p.maker != Maker::kQuantize) continue;
    if (s.spec.needs_compressed_tensors()) {
      return invalid_argument(
          "--schemes: " + s.weights + " cannot be made from " + p.model_dir +
          ": `quantserve quantize` writes weight-only int schemes only, and make-model can "
          "reproduce only its own random checkpoints (" +
          (made_by_make_model ? std::string("--quantizer quantize was asked for")
                              : p.model_dir + " is not one") +
          "). Quantize it elsewhere (e.g. llm-compressor) and give its directory in --schemes");
    }
  }
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("make-model-seed"));
  p.make_seed = static_cast<uint64_t>(seed);
  p.label = flags.get("label");
  if (p.label.empty() || p.label.find('/') != std::string::npos) {
    return invalid_argument("--label must be a non-empty name without '/'");
  }
  p.result_dir = flags.has("result-dir") ? flags.get("result-dir") : "bench-matrix-" + now_stamp();
  for (Scheme& s : p.schemes) {
    if (s.source == Source::kMake) s.dir = p.result_dir + "/models/" + s.weights;
  }
  return p;
}

// make-model's seed is not recorded in what it writes: a checkpoint it made again from the
// reference's config.json is the reference's quantized sibling only if their common
// 16-bit tensors (embeddings, norms, lm_head; quantized linears are stored under other names
// or dtypes) are byte for byte the same. Norms start at one whatever the seed, so at least one
// other tensor must be among them.
Status same_random_weights(const std::string& ref_dir, const std::string& made_dir, uint64_t seed) {
  QS_ASSIGN_OR_RETURN(io::Checkpoint ref, io::Checkpoint::open(ref_dir));
  QS_ASSIGN_OR_RETURN(io::Checkpoint made, io::Checkpoint::open(made_dir));
  const std::vector<std::string> made_names = made.names();
  const std::set<std::string> in_made(made_names.begin(), made_names.end());
  int64_t n_telling = 0;
  for (const std::string& name : ref.names()) {
    if (in_made.count(name) == 0) continue;
    QS_ASSIGN_OR_RETURN(Tensor a, ref.get(name));
    QS_ASSIGN_OR_RETURN(Tensor b, made.get(name));
    if (a.dtype != b.dtype || a.shape != b.shape) continue;
    if (std::memcmp(a.data, b.data, a.nbytes()) != 0) {
      return invalid_argument(
          "`make-model --config " + ref_dir + "/config.json --seed " + std::to_string(seed) +
          "` does not reproduce " + ref_dir + " (" + name +
          " differs): make-model does not record the seed it used. Pass --make-model-seed N "
          "with that seed, --quantizer quantize for RTN by `quantserve quantize`, or make the "
          "quantized checkpoints yourself and give their directories in --schemes");
    }
    if (name.find("norm") == std::string::npos) ++n_telling;
  }
  if (n_telling == 0) {
    return invalid_argument("cannot tell whether make-model reproduces " + ref_dir +
                            ": no unquantized tensor besides norms to compare; give the "
                            "quantized checkpoints as directories in --schemes");
  }
  return ok_status();
}

// Everything of the reference that make-model does not write (tokenizer files, chat
// template), so the made checkpoint serves and tokenizes as the reference does.
Status copy_companion_files(const std::string& from, const std::string& to) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || fs::exists(fs::path(to) / name)) continue;
    if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json") ||
        name == "quantization_config.json")
      continue;
    fs::copy_file(e.path(), fs::path(to) / name, ec);
    if (ec) return io_error("cannot copy " + e.path().string() + ": " + ec.message());
  }
  if (ec) return io_error("cannot list " + from + ": " + ec.message());
  return ok_status();
}

std::vector<std::string> make_argv(const Plan& p, const Scheme& s, const Flags& flags) {
  if (p.maker == Maker::kMakeModel) {
    return {kSelf,        "make-model",
            "--config",   p.model_dir + "/config.json",
            "--seed",     std::to_string(p.make_seed),
            "--quantize", s.weights,
            "--out",      s.dir};
  }
  std::vector<std::string> argv = {kSelf,
                                   "quantize",
                                   "--model",
                                   p.model_dir,
                                   "--output_dir",
                                   s.dir,
                                   "--iters",
                                   "0",
                                   "--disable_opt_rtn",
                                   "--bits",
                                   std::to_string(s.spec.bits),
                                   "--group_size",
                                   std::to_string(s.spec.group_size)};
  if (!s.spec.sym) argv.push_back("--asym");
  if (flags.has("threads")) {
    argv.push_back("--threads");
    argv.push_back(flags.get("threads"));
  }
  return argv;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    out += (out.empty() ? "" : " ") + (a == kSelf ? std::string("quantserve") : a);
  }
  return out;
}

std::string file_safe(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return out;
}

}  // namespace qs::apps::matrix
