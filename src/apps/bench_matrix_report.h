// apps: what `quantserve bench matrix` reports: one cell per scheme x KV budget x
// concurrency (measured, or why not), as JSON and as a markdown table; the CPU and load it
// ran under; the PNG drawn by scripts/plot_bench_matrix.py from the JSON alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench_matrix_plan.h"
#include "apps/flags.h"
#include "bench_client/matrix_server.h"
#include "bench_client/metrics.h"

namespace qs::apps::matrix {

using ojson = nlohmann::ordered_json;

struct Cell {
  const Scheme* scheme = nullptr;
  const Budget* budget = nullptr;
  int64_t concurrency = 0;
  std::string error;  // empty: measured
  std::optional<bench::KvCacheInfo> kv;
  int64_t peak_rss_bytes = -1;
  double preemptions = NAN;
  double startup_s = 0;
  std::string log;
  bench::BenchmarkMetrics m;
  ojson result;  // the bench-serve result JSON
};

ojson cell_json(const Cell& c);
// The table of `cells`; an error becomes a numbered reference into `notes` (one note per
// distinct error, since a server that did not start fails all its concurrencies alike).
std::string markdown_table(const std::vector<Cell>& cells, std::vector<std::string>* notes);

// What docs/benchmarks.md's tables name: lscpu's model name and the ISA flags that matter here.
ojson cpu_info();
// The 1-minute load average: on a shared machine it says how far to trust a table.
std::string loadavg();

// Draws `json_path` into `png_path` with --python and scripts/plot_bench_matrix.py, or says
// how to where either is missing or matplotlib does not import.
void plot(const Flags& flags, const std::string& json_path, const std::string& png_path,
          const std::string& log_dir);

}  // namespace qs::apps::matrix
