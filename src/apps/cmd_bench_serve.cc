// apps: `quantserve bench serve`, vLLM's serving benchmark client (`vllm bench serve`) against
// any OpenAI-compatible server: builds the dataset with the model's tokenizer, sends streamed
// requests at the configured arrival process, prints vLLM's result block to stdout and, with
// --save-result, writes vLLM's result JSON.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/bench_commands.h"
#include "bench_client/metrics.h"
#include "bench_client/report.h"
#include "bench_client/serve_runner.h"

namespace qs::apps {
namespace {

Result<double> parse_number(const std::string& s, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || std::isnan(v)) {
    return invalid_argument(what + " expects a number, got '" + s + "'");
  }
  return v;
}

// --goodput KEY:MS [KEY:MS ...] (vLLM's nargs="+"), keys ttft, tpot, e2el.
Result<std::map<std::string, double>> parse_goodput(const std::vector<std::string>& items) {
  std::map<std::string, double> slo;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return invalid_argument("--goodput expects KEY:VALUE pairs (ms), got '" + item + "'");
    }
    const std::string key = item.substr(0, colon);
    if (key != "ttft" && key != "tpot" && key != "e2el") {
      return invalid_argument("--goodput key must be ttft, tpot or e2el, got '" + key + "'");
    }
    QS_ASSIGN_OR_RETURN(double ms, parse_number(item.substr(colon + 1), "--goodput " + key));
    if (ms < 0) return invalid_argument("--goodput " + key + " must be non-negative");
    slo[key] = ms;
  }
  return slo;
}

// vLLM's --goodput takes several values after one flag; our parser takes one per flag, so
// "--goodput a b" becomes "--goodput a --goodput b".
Args expand_multi_value_flags(const Args& args) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    out.push_back(args[i]);
    if (args[i] != "--goodput") continue;
    if (i + 1 < args.size()) out.push_back(args[++i]);
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      out.push_back("--goodput");
      out.push_back(args[++i]);
    }
  }
  return out;
}

Status run(const Flags& flags) {
  std::string base_url = flags.get("base-url");
  if (base_url.empty()) base_url = "http://" + flags.get("host") + ":" + flags.get("port");
  QS_ASSIGN_OR_RETURN(bench::Endpoint ep, bench::make_endpoint(base_url, flags.get("endpoint")));
  // As vLLM: without --model, the server's first model, whose root may name the tokenizer.
  std::string model = flags.get("model");
  std::vector<std::string> model_dirs = {model};
  if (model.empty()) {
    std::printf("Model not specified, fetching first model from server...\n");
    QS_ASSIGN_OR_RETURN(bench::ServedModel served, bench::first_served_model(ep));
    std::printf("First model name: %s, first model id: %s\n", served.id.c_str(),
                served.root.c_str());
    model = served.id;
    model_dirs = {served.root, served.id};
  }

  bench::ReportConfig rc;
  rc.backend = ep.chat ? "openai-chat" : "openai";
  rc.label = flags.get("label");
  rc.model_id = model;
  QS_ASSIGN_OR_RETURN(rc.request_rate, parse_number(flags.get("request-rate"), "--request-rate"));
  QS_ASSIGN_OR_RETURN(rc.burstiness, parse_number(flags.get("burstiness"), "--burstiness"));
  if (flags.has("max-concurrency")) {
    QS_ASSIGN_OR_RETURN(int64_t c, flags.get_int("max-concurrency"));
    if (c <= 0) return invalid_argument("--max-concurrency must be greater than 0");
    rc.max_concurrency = c;
  }
  QS_ASSIGN_OR_RETURN(rc.percentile_metrics, flags.get_list("percentile-metrics"));
  for (const std::string& m : rc.percentile_metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      return invalid_argument("--percentile-metrics knows ttft, tpot, itl, e2el; got '" + m + "'");
    }
  }
  QS_ASSIGN_OR_RETURN(auto pcts, flags.get_list("metric-percentiles"));
  for (const std::string& p : pcts) {
    QS_ASSIGN_OR_RETURN(double v, parse_number(p, "--metric-percentiles"));
    if (v < 0 || v > 100) return invalid_argument("--metric-percentiles must be in [0, 100]");
    rc.percentiles.push_back(v);
  }
  QS_ASSIGN_OR_RETURN(rc.goodput_slo_ms, parse_goodput(flags.get_all("goodput")));

  QS_ASSIGN_OR_RETURN(auto tokenizer, load_bench_tokenizer(flags, model_dirs, &rc.tokenizer_id));
  QS_ASSIGN_OR_RETURN(std::vector<bench::SampleRequest> requests, load_dataset(flags, *tokenizer));
  QS_ASSIGN_OR_RETURN(rc.num_prompts, flags.get_int("num-prompts"));

  bench::ServeRunOptions o;
  o.model = model;
  o.request_rate = rc.request_rate;
  o.burstiness = rc.burstiness;
  o.max_concurrency = rc.max_concurrency;
  QS_ASSIGN_OR_RETURN(int64_t seed, flags.get_int("seed"));
  o.seed = static_cast<uint64_t>(seed);
  // Newest vLLM forces ignore_eos for the random dataset so outputs run to their lengths.
  o.ignore_eos = flags.get_bool("ignore-eos") || flags.get("dataset-name") == "random";
  o.progress = !flags.get_bool("disable-tqdm") && isatty(STDERR_FILENO);

  std::printf("Traffic request rate: %s\n", bench::python_float_str(o.request_rate).c_str());
  std::printf("Burstiness factor: %s (%s)\n", bench::python_float_str(o.burstiness).c_str(),
              o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  std::printf("Maximum request concurrency: %s\n",
              o.max_concurrency ? std::to_string(*o.max_concurrency).c_str() : "None");
  std::fflush(stdout);
  QS_ASSIGN_OR_RETURN(bench::ServeRun run, bench::run_serve_benchmark(ep, requests, o));

  auto count = [&](const std::string& text) {
    return static_cast<int64_t>(tokenizer->encode(text, /*add_special_tokens=*/false).size());
  };
  const bench::BenchmarkMetrics m = bench::calculate_metrics(run.outputs, run.duration_s, count,
                                                             rc.percentiles, rc.goodput_slo_ms);
  if (m.failed > 0) {
    std::printf("Failed requests during benchmark run detected (capping to 10):\n");
    int shown = 0;
    for (const bench::RequestOutput& out : run.outputs) {
      if (out.success || shown == 10) continue;
      std::printf("Error %d: %s\n", shown++, out.error.c_str());
    }
  }
  std::printf("%s", bench::format_result(m, run.duration_s, rc).c_str());
  std::fflush(stdout);

  if (flags.get_bool("save-result")) {
    const std::string date = now_stamp();
    std::string file = flags.has("result-filename") ? flags.get("result-filename")
                                                    : bench::result_filename(rc, date);
    if (flags.has("result-dir")) {
      std::error_code ec;
      std::filesystem::create_directories(flags.get("result-dir"), ec);
      if (ec) return io_error("cannot create " + flags.get("result-dir") + ": " + ec.message());
      file = (std::filesystem::path(flags.get("result-dir")) / file).string();
    }
    // Keys in vLLM's order (nlohmann::json would sort them), so the file reads like vLLM's.
    const nlohmann::ordered_json j = bench::result_json(m, run.duration_s, run.outputs, rc, date);
    std::ofstream out(file);
    out << j.dump(2) << "\n";
    if (!out) return io_error("cannot write " + file);
    std::fprintf(stderr, "bench: wrote %s\n", file.c_str());
  }
  // vLLM only warns; a run where nothing succeeded measured nothing, so scripts see a failure.
  if (m.completed == 0) {
    return internal_error("all " + std::to_string(run.outputs.size()) +
                          " requests failed (first error: " + run.outputs[0].error + ")");
  }
  return ok_status();
}

}  // namespace

int bench_serve(const Args& args) {
  Flags flags;
  flags.add("base-url", "server URL, e.g. http://127.0.0.1:8000 (instead of --host/--port)")
      .add("host", "server host", false, "127.0.0.1")
      .add("port", "server port", false, "8000")
      .add("endpoint", "/v1/completions or /v1/chat/completions", false, "/v1/completions")
      .add("model",
           "model name sent in requests (a directory also gives the tokenizer; "
           "default: the server's first model)")
      .add("tokenizer", "tokenizer directory (default: --model when it is a directory)")
      .add("label", "result file prefix (default: the backend, openai or openai-chat)")
      .add("request-rate", "requests/s, or inf to send all at once", false, "inf")
      .add("burstiness", "gamma shape of inter-arrival gaps (1 = Poisson)", false, "1.0")
      .add("max-concurrency", "most requests in flight at once")
      .add("ignore-eos", "ask the server to ignore EOS (always on for random)", true)
      .add("percentile-metrics", "of ttft,tpot,itl,e2el", false, "ttft,tpot,itl")
      .add("metric-percentiles", "comma-separated percentiles", false, "99")
      .add("goodput", "SLOs as KEY:MS ... (ttft, tpot, e2el)")
      .add("save-result", "write the result JSON", true)
      .add("result-dir", "directory of the result JSON")
      .add("result-filename", "name of the result JSON (default as vLLM)")
      .add("disable-tqdm", "no progress counter on stderr", true);
  add_dataset_flags(flags);
  return run_command(
      "bench serve", flags, expand_multi_value_flags(args),
      [](const Flags&) { return ok_status(); }, run);
}

}  // namespace qs::apps
