// apps: bench matrix's report (see bench_matrix_report.h).
#include "apps/bench_matrix_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace qs::apps::matrix {
namespace {

namespace fs = std::filesystem;

double p99(const bench::MetricSummary& s) {
  for (const auto& [p, v] : s.percentiles_ms)
    if (p == 99.0) return v;
  return NAN;
}

ojson num_or_null(double v) {
  return std::isnan(v) ? ojson(nullptr) : ojson(v);
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// An executable named on $PATH (execve does not search it), or "" when none.
std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string f = (dir.empty() ? "." : dir) + "/" + name;
    if (access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

// scripts/plot_bench_matrix.py beside the source tree this binary was built in (build*/ is
// one level under it), else under the working directory.
std::string find_plot_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& root :
       {exe.parent_path().parent_path(), exe.parent_path(), fs::current_path(ec)}) {
    const fs::path p = root / "scripts" / "plot_bench_matrix.py";
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

}  // namespace

ojson cpu_info() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown", flag_line;
  while (std::getline(in, line)) {
    if (model == "unknown" && line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
    }
    if (flag_line.empty() && line.rfind("flags", 0) == 0) flag_line = " " + line + " ";
  }
  ojson flags = ojson::array();
  for (const char* f : {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                        "amx_bf16", "amx_int8"}) {
    if (flag_line.find(" " + std::string(f) + " ") != std::string::npos) flags.push_back(f);
  }
  return {{"model_name", model},
          {"n_cpus", static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN))},
          {"flags", flags}};
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string one_minute;
  in >> one_minute;
  return one_minute;
}

ojson cell_json(const Cell& c) {
  ojson j;
  j["scheme"] = c.scheme->name;
  j["weights"] = c.scheme->weights;
  j["kv_cache_dtype"] = c.scheme->fp8_kv ? "fp8" : "auto";
  j["kv_cache_memory"] = c.budget->text;
  j["kv_cache_memory_bytes"] = c.budget->bytes;
  j["max_concurrency"] = c.concurrency;
  j["status"] = c.error.empty() ? "ok" : "error";
  j["error"] = c.error.empty() ? ojson(nullptr) : ojson(c.error);
  j["kv_cache_tokens"] = c.kv ? ojson(c.kv->tokens) : ojson(nullptr);
  j["kv_cache_blocks"] = c.kv ? ojson(c.kv->n_blocks) : ojson(nullptr);
  j["kv_cache_block_size"] = c.kv ? ojson(c.kv->block_size) : ojson(nullptr);
  j["kv_cache_mib"] = c.kv ? ojson(c.kv->mib) : ojson(nullptr);
  j["kv_cache_engine_dtype"] = c.kv ? ojson(c.kv->dtype) : ojson(nullptr);
  j["peak_rss_mib"] = c.peak_rss_bytes >= 0 ? ojson(c.peak_rss_bytes / 1048576.0) : ojson(nullptr);
  j["server_startup_s"] = c.startup_s;
  j["server_log"] = c.log;
  const bool measured = c.error.empty();
  j["completed"] = measured ? ojson(c.m.completed) : ojson(nullptr);
  j["failed"] = measured ? ojson(c.m.failed) : ojson(nullptr);
  j["preemptions"] = measured ? num_or_null(c.preemptions) : ojson(nullptr);
  j["output_throughput"] = measured ? ojson(c.m.output_throughput) : ojson(nullptr);
  j["mean_ttft_ms"] = measured ? ojson(c.m.ttft.mean_ms) : ojson(nullptr);
  j["p99_ttft_ms"] = measured ? num_or_null(p99(c.m.ttft)) : ojson(nullptr);
  j["mean_tpot_ms"] = measured ? ojson(c.m.tpot.mean_ms) : ojson(nullptr);
  j["mean_itl_ms"] = measured ? ojson(c.m.itl.mean_ms) : ojson(nullptr);
  j["result"] = measured ? c.result : ojson(nullptr);
  return j;
}

std::string markdown_table(const std::vector<Cell>& cells, std::vector<std::string>* notes) {
  std::string t =
      "| scheme | KV memory | concurrency | output tok/s | mean TTFT ms | P99 TTFT ms | mean TPOT "
      "ms | mean ITL ms | KV tokens | peak RSS MiB | preemptions | failed |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Cell& c : cells) {
    const std::string kv = c.kv ? std::to_string(c.kv->tokens) : "-";
    const std::string rss = fmt("%.0f", c.peak_rss_bytes >= 0 ? c.peak_rss_bytes / 1048576.0 : NAN);
    t += "| " + c.scheme->name + " | " + c.budget->text + " | " + std::to_string(c.concurrency) +
         " | ";
    if (!c.error.empty()) {
      // A server that did not start fails all its concurrencies alike: one note for them.
      const std::string note = c.scheme->name + ", KV " + c.budget->text + ": " + c.error;
      auto it = std::find(notes->begin(), notes->end(), note);
      if (it == notes->end()) it = notes->insert(notes->end(), note);
      t += "error [" + std::to_string(it - notes->begin() + 1) + "] | - | - | - | - | " + kv +
           " | " + rss + " | - | - |\n";
      continue;
    }
    t += fmt("%.1f", c.m.output_throughput) + " | " + fmt("%.1f", c.m.ttft.mean_ms) + " | " +
         fmt("%.1f", p99(c.m.ttft)) + " | " + fmt("%.2f", c.m.tpot.mean_ms) + " | " +
         fmt("%.2f", c.m.itl.mean_ms) + " | " + kv + " | " + rss + " | " +
         fmt("%.0f", c.preemptions) + " | " + std::to_string(c.m.failed) + " |\n";
  }
  return t;
}

void plot(const Flags& flags, const std::string& json_path, const std::string& png_path,
          const std::string& log_dir) {
  const std::string script = find_plot_script();
  const std::string python_name = flags.get("python");
  const std::string python = find_executable(python_name);
  const std::string shown_script = script.empty() ? "scripts/plot_bench_matrix.py" : script;
  const std::string cmd = python_name + " " + shown_script + " " + json_path + " -o " + png_path;
  const std::string venv =
      "python3 -m venv .venv-plot && .venv-plot/bin/pip install -r scripts/requirements-plot.txt";
  if (script.empty() || python.empty() ||
      !bench::run_child_to_completion({python, "-c", "import matplotlib"},
                                      log_dir + "/plot-check.log", 60)
           .ok()) {
    std::printf("\nplot: %s; to draw it: %s && .venv-plot/bin/python %s %s -o %s\n",
                script.empty()   ? "scripts/plot_bench_matrix.py not found"
                : python.empty() ? (python_name + " not found").c_str()
                                 : (python_name + " cannot import matplotlib").c_str(),
                venv.c_str(), shown_script.c_str(), json_path.c_str(), png_path.c_str());
    return;
  }
  Status s = bench::run_child_to_completion({python, script, json_path, "-o", png_path},
                                            log_dir + "/plot.log", 300);
  if (s.ok()) {
    std::printf("\nplot: wrote %s (%s)\n", png_path.c_str(), cmd.c_str());
  } else {
    std::printf("\nplot: `%s` failed: %s\n", cmd.c_str(), s.message().c_str());
  }
}

}  // namespace qs::apps::matrix
