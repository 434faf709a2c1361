// apps: `quantserve bench matrix`: seed-003's scheme x KV-memory table in one command. For
// every weight scheme (the reference directory, a quantized sibling directory, or a scheme
// this command makes from the reference by RTN) and every KV-cache budget it starts
// `quantserve serve` as a child, runs the `bench serve` client in process at each concurrency,
// reads the server's KV capacity (its startup line) and peak RSS (VmHWM), and stops it. What
// runs is checked first (bench_matrix_plan.h); what it measured is reported as a markdown
// table, one JSON, and a PNG where matplotlib imports (bench_matrix_report.h).
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/bench_commands.h"
#include "apps/bench_matrix_plan.h"
#include "apps/bench_matrix_report.h"
#include "bench_client/matrix_server.h"
#include "bench_client/metrics.h"
#include "bench_client/report.h"
#include "bench_client/serve_runner.h"

namespace qs::apps {
namespace {

namespace fs = std::filesystem;
using namespace matrix;

template <typename T>
T value_or(const Result<T>& r, T fallback) {
  return r.ok() ? *r : fallback;
}

Status check_flags(const Flags& flags) {
  QS_RETURN_IF_ERROR(make_plan(flags).status());
  if (flags.has("threads")) {
    QS_ASSIGN_OR_RETURN(int64_t t, flags.get_int("threads"));
    if (t < 1 || t > 1024) return invalid_argument("--threads must be in [1, 1024]");
  }
  QS_ASSIGN_OR_RETURN(int64_t port, flags.get_int("port"));
  if (port < 0 || port > 65535) return invalid_argument("--port must be in [0, 65535]");
  for (const char* f : {"server-timeout", "cell-timeout", "make-timeout"}) {
    QS_ASSIGN_OR_RETURN(double v, flags.get_double(f));
    if (!(v > 0)) return invalid_argument("--" + std::string(f) + " must be positive");
  }
  QS_ASSIGN_OR_RETURN(int64_t warmups, flags.get_int("num-warmups"));
  if (warmups < 0) return invalid_argument("--num-warmups must be non-negative");
  if (flags.has("max-model-len")) {
    QS_ASSIGN_OR_RETURN(int64_t len, flags.get_int("max-model-len"));
    if (len < 1) return invalid_argument("--max-model-len must be positive");
  }
  const std::string rate = flags.get("request-rate");
  if (rate != "inf") QS_RETURN_IF_ERROR(flags.get_double("request-rate").status());
  return ok_status();
}

// Ends a cell's run at its deadline by killing the server, whose requests then fail at once.
class Watchdog {
 public:
  Watchdog(bench::ServerProcess& server, double timeout_s)
      : thread_([this, &server, timeout_s] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                            [this] { return done_; })) {
            fired_ = true;
            server.kill_now();
          }
        }) {}
  // Returns whether it fired.
  bool finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// One server (scheme x budget): every concurrency's cell, measured or with its error.
void run_server_cells(const Plan& p, const Flags& flags, const Scheme& scheme, const Budget& budget,
                      const std::vector<std::vector<bench::SampleRequest>>& datasets,
                      const tok::Tokenizer& tokenizer, const std::string& tokenizer_id,
                      int64_t max_model_len, const std::string& make_error,
                      std::vector<Cell>* cells) {
  const size_t first = cells->size();
  for (int64_t c : p.concurrencies) {
    Cell cell;
    cell.scheme = &scheme;
    cell.budget = &budget;
    cell.concurrency = c;
    cell.error = make_error;
    cells->push_back(cell);
  }
  auto fail_rest = [&](size_t from, const std::string& why) {
    for (size_t i = from; i < cells->size(); ++i) {
      if ((*cells)[i].error.empty()) (*cells)[i].error = why;
    }
  };
  if (!make_error.empty()) return;
  const std::string log = p.result_dir + "/logs/serve-" + file_safe(scheme.name) + "-" +
                          file_safe(budget.text) + ".log";
  std::vector<std::string> args = {scheme.dir,
                                   "--port",
                                   flags.get("port"),
                                   "--served-model-name",
                                   scheme.name,
                                   "--kv-cache-memory",
                                   budget.text,
                                   "--max-model-len",
                                   std::to_string(max_model_len)};
  if (flags.has("threads")) args.insert(args.end(), {"--threads", flags.get("threads")});
  if (scheme.fp8_kv) args.insert(args.end(), {"--kv-cache-dtype", "fp8"});
  for (const std::string& a : flags.get_all("serve-arg")) args.push_back(a);
  std::fprintf(stderr, "bench matrix: %s, KV %s: quantserve serve %s\n", scheme.name.c_str(),
               budget.text.c_str(), shell_join(args).c_str());
  Result<std::unique_ptr<bench::ServerProcess>> started =
      bench::ServerProcess::start(args, log, *flags.get_double("server-timeout"));
  for (size_t i = first; i < cells->size(); ++i) (*cells)[i].log = log;
  if (!started.ok()) {
    fail_rest(first, started.status().message());
    return;
  }
  bench::ServerProcess& server = **started;
  Result<bench::Endpoint> ep = bench::make_endpoint(server.base_url(), "/v1/completions");
  QS_CHECK(ep.ok());
  for (size_t i = first; i < cells->size(); ++i) {
    (*cells)[i].kv = server.kv_cache();
    (*cells)[i].startup_s = server.startup_s();
  }
  // Warm-ups page the weights in; they are not measured.
  const int64_t warmups = *flags.get_int("num-warmups");
  for (int64_t w = 0; w < warmups; ++w) {
    bench::send_streaming_request(
        *ep, bench::request_body(*ep, scheme.name, "Hello", 4, true).dump(), 1,
        "matrix-warmup-" + std::to_string(w), std::chrono::steady_clock::now());
  }
  const double cell_timeout = *flags.get_double("cell-timeout");
  double preempt_before =
      value_or(server.metric("vllm:num_preemptions_total"), static_cast<double>(NAN));
  for (size_t k = 0; k < p.concurrencies.size(); ++k) {
    Cell& cell = (*cells)[first + k];
    if (std::optional<bench::ChildExit> e = server.exited()) {
      fail_rest(first + k, "server died (" + e->describe() + "); last lines of " + log + ":\n" +
                               bench::tail_lines(log, 6));
      break;
    }
    bench::ServeRunOptions o;
    o.model = scheme.name;
    o.request_rate =
        flags.get("request-rate") == "inf" ? INFINITY : *flags.get_double("request-rate");
    o.max_concurrency = cell.concurrency;
    o.seed = static_cast<uint64_t>(*flags.get_int("seed")) + k;
    o.ignore_eos = flags.get_bool("ignore-eos") || flags.get("dataset-name") == "random";
    o.request_id_prefix = "matrix-";
    Watchdog watchdog(server, cell_timeout);
    Result<bench::ServeRun> run = bench::run_serve_benchmark(*ep, datasets[k], o);
    const bool timed_out = watchdog.finish();
    if (timed_out) {
      fail_rest(first + k, "no result within --cell-timeout " + flags.get("cell-timeout") +
                               " s; the server was killed");
      break;
    }
    if (!run.ok()) {
      cell.error = run.status().message();
      continue;
    }
    if (std::optional<bench::ChildExit> e = server.exited()) {
      fail_rest(first + k, "server died during the run (" + e->describe() + "); last lines of " +
                               log + ":\n" + bench::tail_lines(log, 6));
      break;
    }
    auto count = [&](const std::string& text) {
      return static_cast<int64_t>(tokenizer.encode(text, /*add_special_tokens=*/false).size());
    };
    bench::ReportConfig rc;
    rc.label = p.label;
    rc.model_id = scheme.dir;
    rc.tokenizer_id = tokenizer_id;
    rc.num_prompts = static_cast<int64_t>(datasets[k].size());
    rc.request_rate = o.request_rate;
    rc.max_concurrency = cell.concurrency;
    rc.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
    rc.percentiles = {99};
    cell.m = bench::calculate_metrics(run->outputs, run->duration_s, count, rc.percentiles, {});
    cell.result = bench::result_json(cell.m, run->duration_s, run->outputs, rc, now_stamp());
    cell.peak_rss_bytes = value_or<int64_t>(server.peak_rss_bytes(), -1);
    const double preempt_after =
        value_or(server.metric("vllm:num_preemptions_total"), static_cast<double>(NAN));
    cell.preemptions = preempt_after - preempt_before;
    preempt_before = preempt_after;
    std::fprintf(stderr,
                 "bench matrix: %s, KV %s, concurrency %lld: %.1f output tok/s, %lld/%lld "
                 "requests completed\n",
                 scheme.name.c_str(), budget.text.c_str(), static_cast<long long>(cell.concurrency),
                 cell.m.output_throughput, static_cast<long long>(cell.m.completed),
                 static_cast<long long>(datasets[k].size()));
  }
  const bench::ChildExit e = server.stop(30);
  if (!e.ok() && !(e.signal == SIGKILL)) {
    std::fprintf(stderr, "bench matrix: warning: the server of %s, KV %s ended with %s\n",
                 scheme.name.c_str(), budget.text.c_str(), e.describe().c_str());
  }
}

Status run(const Flags& flags, const Args& args) {
  QS_ASSIGN_OR_RETURN(Plan p, make_plan(flags));
  bench::install_child_reaper();
  const std::string date = now_stamp();
  const std::string load_before = loadavg();
  std::error_code ec;
  fs::create_directories(p.result_dir + "/logs", ec);
  if (ec) return io_error("cannot create " + p.result_dir + "/logs: " + ec.message());

  std::string tokenizer_id;
  QS_ASSIGN_OR_RETURN(auto tokenizer, load_bench_tokenizer(flags, {p.model_dir}, &tokenizer_id));
  // The k-th concurrency runs on the dataset of --seed + k: on one server, the prompts of the
  // run before are then not prefix-cache hits.
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  std::vector<std::vector<bench::SampleRequest>> datasets;
  int64_t longest = 0;
  for (size_t k = 0; k < p.concurrencies.size(); ++k) {
    Flags f = flags;
    QS_RETURN_IF_ERROR(f.parse({"--seed", std::to_string(seed + static_cast<int64_t>(k))}));
    QS_ASSIGN_OR_RETURN(auto requests, load_dataset(f, *tokenizer));
    for (const auto& r : requests)
      longest = std::max(longest, r.prompt_len + r.expected_output_len);
    datasets.push_back(std::move(requests));
  }
  // Room for the longest request and a little slack (the server may count the prompt a token
  // or two differently), in whole KV blocks: what each request can need, and no more, so that
  // a small budget is a limit on concurrency rather than a refusal to start.
  int64_t max_model_len = (longest + 8 + 15) / 16 * 16;
  if (flags.has("max-model-len")) max_model_len = *flags.get_int("max-model-len");

  std::fprintf(stderr,
               "bench matrix: %zu schemes x %zu KV budgets x %zu concurrencies, %zu prompts "
               "each, max_model_len %lld; results in %s\n",
               p.schemes.size(), p.budgets.size(), p.concurrencies.size(), datasets[0].size(),
               static_cast<long long>(max_model_len), p.result_dir.c_str());

  // Made schemes first (one checkpoint for w4g128 and w4g128+fp8kv), before any server.
  std::map<std::string, std::string> make_errors;
  std::map<std::string, ojson> made_by;
  for (const Scheme& s : p.schemes) {
    if (s.source != Source::kMake || made_by.count(s.weights) > 0) continue;
    const std::vector<std::string> argv = make_argv(p, s, flags);
    made_by[s.weights] = shell_join(argv);
    std::fprintf(stderr, "bench matrix: %s\n", shell_join(argv).c_str());
    fs::remove_all(s.dir, ec);
    fs::create_directories(fs::path(s.dir).parent_path(), ec);
    const std::string log = p.result_dir + "/logs/make-" + file_safe(s.weights) + ".log";
    Status made = bench::run_child_to_completion(argv, log, *flags.get_double("make-timeout"));
    if (made.ok() && p.maker == Maker::kMakeModel) {
      QS_RETURN_IF_ERROR(same_random_weights(p.model_dir, s.dir, p.make_seed));
      made = copy_companion_files(p.model_dir, s.dir);
    }
    if (!made.ok()) make_errors[s.weights] = "making " + s.weights + " failed: " + made.message();
  }

  std::vector<Cell> cells;
  for (const Scheme& s : p.schemes) {
    for (const Budget& b : p.budgets) {
      const auto err = make_errors.find(s.weights);
      run_server_cells(p, flags, s, b, datasets, *tokenizer, tokenizer_id, max_model_len,
                       err == make_errors.end() ? "" : err->second, &cells);
    }
  }

  ojson j;
  j["kind"] = "quantserve bench matrix";
  j["date"] = date;
  j["label"] = p.label;
  std::string command = "quantserve bench matrix";
  for (const std::string& a : args) command += " " + a;
  j["command"] = command;
  j["cpu"] = cpu_info();
  j["threads"] = flags.has("threads") ? ojson(*flags.get_int("threads")) : ojson(nullptr);
  j["load_before"] = load_before;
  j["load_after"] = loadavg();
  j["model"] = p.model_dir;
  j["dataset"] = {
      {"name", flags.get("dataset-name")},
      {"num_prompts", datasets[0].size()},
      {"random_input_len", flags.get(flags.has("input-len") ? "input-len" : "random-input-len")},
      {"random_output_len",
       flags.get(flags.has("output-len") ? "output-len" : "random-output-len")},
      {"seed", seed}};
  j["max_model_len"] = max_model_len;
  j["schemes"] = ojson::array();
  for (const Scheme& s : p.schemes) {
    const char* source = s.source == Source::kReference   ? "reference"
                         : s.source == Source::kDirectory ? "directory"
                                                          : "made";
    j["schemes"].push_back(
        {{"name", s.name},
         {"weights", s.weights},
         {"source", source},
         {"dir", s.dir},
         {"kv_cache_dtype", s.fp8_kv ? "fp8" : "auto"},
         {"made_by", s.source == Source::kMake ? made_by[s.weights] : ojson(nullptr)}});
  }
  j["kv_cache_memory"] = ojson::array();
  for (const Budget& b : p.budgets)
    j["kv_cache_memory"].push_back({{"text", b.text}, {"bytes", b.bytes}});
  j["max_concurrency"] = p.concurrencies;
  j["cells"] = ojson::array();
  for (const Cell& c : cells) j["cells"].push_back(cell_json(c));
  const std::string json_path = p.result_dir + "/" + p.label + ".json";
  {
    std::ofstream out(json_path);
    out << j.dump(2) << "\n";
    if (!out) return io_error("cannot write " + json_path);
  }

  const ojson& cpu = j["cpu"];
  std::string isa;
  for (const auto& f : cpu["flags"]) isa += (isa.empty() ? "" : " ") + f.get<std::string>();
  std::printf(
      "CPU: %s, %lld CPUs (flags %s); serve --threads %s; load average %s before, %s after\n\n",
      cpu["model_name"].get<std::string>().c_str(),
      static_cast<long long>(cpu["n_cpus"].get<int64_t>()), isa.c_str(),
      flags.has("threads") ? flags.get("threads").c_str() : "default", load_before.c_str(),
      j["load_after"].get<std::string>().c_str());
  std::vector<std::string> notes;
  std::printf("%s", markdown_table(cells, &notes).c_str());
  for (size_t i = 0; i < notes.size(); ++i) std::printf("\n[%zu] %s\n", i + 1, notes[i].c_str());
  std::printf("\nJSON: %s\n", json_path.c_str());
  if (!flags.get_bool("no-plot")) {
    plot(flags, json_path, p.result_dir + "/" + p.label + ".png", p.result_dir + "/logs");
  }
  std::fflush(stdout);
  if (!flags.get_bool("keep-models")) fs::remove_all(p.result_dir + "/models", ec);

  int64_t n_errors = 0, n_failed = 0;
  for (const Cell& c : cells) {
    n_errors += !c.error.empty();
    n_failed += c.error.empty() ? c.m.failed : 0;
  }
  if (n_errors > 0 || n_failed > 0) {
    return internal_error(std::to_string(n_errors) + " of " + std::to_string(cells.size()) +
                          " cells did not run, " + std::to_string(n_failed) +
                          " requests failed (see the table)");
  }
  return ok_status();
}

}  // namespace

int bench_matrix(const Args& args) {
  Flags flags;
  flags
      .add("model",
           "the unquantized reference checkpoint directory (or a Hugging Face repo id in the "
           "local cache)")
      .add("schemes", std::string("comma-separated; ") + kSchemeHelp, false, "bf16,w4g128")
      .add("kv-cache-memory", "comma-separated KV-cache budgets, serve's spelling", false,
           "64MiB,512MiB")
      .add("max-concurrency", "comma-separated concurrencies, one bench serve run each", false,
           "1,8")
      .add("tokenizer", "tokenizer directory (default: --model)")
      .add("threads", "serve --threads (default: serve's)")
      .add("port", "port of each server (0: any free port)", false, "0")
      .add("max-model-len",
           "serve --max-model-len (default: the longest request + 8, in whole 16-token blocks)")
      .add("serve-arg",
           "one more flag for every serve, e.g. --serve-arg=--max-num-seqs=16 "
           "(repeatable)")
      .add("request-rate", "requests/s, or inf to send all at once", false, "inf")
      .add("ignore-eos", "ask the server to ignore EOS (always on for random)", true)
      .add("num-warmups", "unmeasured short requests per server before its runs", false, "1")
      .add("result-dir",
           "where the JSON, PNG, logs and made checkpoints go "
           "(default: ./bench-matrix-DATE)")
      .add("label", "file name of the JSON and PNG in --result-dir", false, "matrix")
      .add("keep-models", "keep the made checkpoints (RESULT_DIR/models)", true)
      .add("quantizer",
           "how schemes are made: make-model (--model must be a make-model checkpoint: it is "
           "made again from its config.json, checked against it), quantize (RTN: quantize "
           "--iters 0 --disable_opt_rtn; int weight-only schemes), or auto (make-model when "
           "--model looks made by it)",
           false, "auto")
      .add("make-model-seed", "the --seed --model was made with (make-model)", false, "0")
      .add("server-timeout", "seconds a server may take to answer /health", false, "600")
      .add("cell-timeout", "seconds one concurrency's run may take", false, "3600")
      .add("make-timeout", "seconds making one checkpoint may take", false, "3600")
      .add("python", "interpreter of scripts/plot_bench_matrix.py", false, "python3")
      .add("no-plot", "do not draw the PNG", true);
  add_dataset_flags(flags);
  // The matrix runs every request set once per cell: smaller defaults than bench serve's
  // (given flags come later and win).
  Args with_defaults = {"--num-prompts",       "32", "--random-input-len", "128",
                        "--random-output-len", "64"};
  with_defaults.insert(with_defaults.end(), args.begin(), args.end());
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf(
          "`bench matrix` serves each scheme at each KV-cache budget with `quantserve serve` (a "
          "child process) and runs `bench serve` against it at each concurrency; it prints a "
          "markdown table (output tok/s, TTFT, TPOT, ITL, KV capacity, peak RSS), writes "
          "RESULT_DIR/LABEL.json and, where matplotlib imports, RESULT_DIR/LABEL.png.\n"
          "Here --num-prompts, --random-input-len and --random-output-len default to 32, 128 "
          "and 64 (not bench serve's defaults listed below).\n\n");
      break;
    }
  }
  return run_command("bench matrix", flags, with_defaults, check_flags,
                     [&args](const Flags& f) { return run(f, args); });
}

}  // namespace qs::apps
