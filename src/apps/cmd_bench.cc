// apps: `quantserve bench latency`, in the spirit of llama-bench: prefill (pp) and decode
// (tg) tokens/s of one sequence, mean +- sd over repetitions, for each thread count asked.
// Decode is memory-bound, so every tg result also reports the roofline: resident weight bytes
// read per token (packed, for quantized checkpoints) x tokens/s over the read bandwidth measured
// right before and right after that test on the same threads (this machine's bandwidth drifts,
// so a figure from another run means little).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/bench_commands.h"
#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/model_flags.h"
#include "apps/tensor_parallel.h"
#include "core/json.h"
#include "engine/engine.h"
#include "engine/memory_budget.h"
#include "io/checkpoint.h"
#include "models/model.h"
#include "ops/platform.h"

namespace qs::apps {
namespace {

struct Stats {
  double mean = 0, sd = 0;
};

Stats mean_sd(const std::vector<double>& v) {
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0.0;
  return s;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Result<std::vector<int>> parse_int_list(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0) {
      return invalid_argument("--" + flag +
                              " expects comma-separated non-negative integers, got '" + s + "'");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return invalid_argument("--" + flag + " is empty");
  return out;
}

// One pp or tg measurement through the engine, as one request with greedy sampling: a prefill
// is a prompt of `tokens` and one sampled token (one forward); a decode is a one-token prompt
// and tokens.size() sampled tokens, one forward each. Returns seconds.
Result<double> run_once(engine::Engine& engine, const std::vector<int32_t>& tokens, bool prefill) {
  engine::EngineRequest request;
  request.id = "bench";
  request.prompt_ids = prefill ? tokens : std::vector<int32_t>{tokens[0]};
  request.params.temperature = 0.0f;
  request.params.ignore_eos = true;
  request.params.max_tokens = prefill ? 1 : static_cast<int32_t>(tokens.size());
  const double t0 = now_seconds();
  QS_RETURN_IF_ERROR(engine.add_request(std::move(request)));
  while (engine.has_unfinished()) {
    for (const engine::RequestOutput& out : engine.step()) QS_RETURN_IF_ERROR(out.error);
  }
  return now_seconds() - t0;
}

Status bench_latency(const Flags& flags) {
  if (!flags.has("model")) return invalid_argument("--model DIR is required");
  QS_ASSIGN_OR_RETURN(const std::string dir, resolve_model_flag(flags, flags.get("model")));
  QS_ASSIGN_OR_RETURN(std::vector<int> input_lens,
                      parse_int_list(flags.get("input-len"), "input-len"));
  QS_ASSIGN_OR_RETURN(std::vector<int> output_lens,
                      parse_int_list(flags.get("output-len"), "output-len"));
  QS_ASSIGN_OR_RETURN(std::vector<int> threads_list,
                      parse_int_list(flags.get("threads"), "threads"));
  QS_ASSIGN_OR_RETURN(int64_t reps, flags.get_int("repetitions"));
  if (reps < 1) return invalid_argument("--repetitions must be at least 1");
  const bool roofline = !flags.get_bool("no-roofline");

  const double t_load = now_seconds();
  QS_ASSIGN_OR_RETURN(std::shared_ptr<dist::Communicator> tp, tensor_parallel_group(flags));
  QS_ASSIGN_OR_RETURN(const models::LoadOptions load, load_options_from_flags(flags));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<models::Model> model,
                      load_tensor_parallel_model(dir, load, tp));
  if (tp != nullptr && tp->rank() != 0) {
    // Each rank runs with the most threads the list names (give one count per run for a
    // clean comparison).
    const int most = *std::max_element(threads_list.begin(), threads_list.end());
    return run_worker_rank(*model, most == 0 ? ThreadPool::default_threads() : most);
  }
  WorkerRelease release_workers(tp.get());
  const models::ModelConfig& cfg = model->config();
  // The roofline counts what a decode step really streams: the resident form of every matmul
  // (packed int codes and scales for quantized layers, lm_head included) and the norms; of the
  // embedding table a step reads one row.
  const uint64_t bytes_per_token = model->decode_weight_bytes();
  const uint64_t resident_bytes = model->resident_weight_bytes();
  const io::QuantConfig& quant = model->quant_config();
  const std::string weights = quant.quantized() ? quant.summary() : "unquantized";
  std::fprintf(stderr,
               "bench: loaded %s (%s; %s) in %.2f s; kernels: %s; resident weights %.1f MiB; "
               "weight bytes/token %.1f MiB\n",
               dir.c_str(), cfg.architecture.c_str(), weights.c_str(), now_seconds() - t_load,
               ops::active_kernel_isa(), resident_bytes / 1048576.0, bytes_per_token / 1048576.0);

  int64_t max_tokens = 0;
  for (int n : input_lens) max_tokens = std::max<int64_t>(max_tokens, n);
  for (int n : output_lens) max_tokens = std::max<int64_t>(max_tokens, n);
  if (max_tokens > cfg.max_position_embeddings) {
    return out_of_range("test length " + std::to_string(max_tokens) +
                        " exceeds max_position_embeddings " +
                        std::to_string(cfg.max_position_embeddings));
  }
  // Room for the longest test plus its sampled token; no prefix caching, so that repetitions
  // compute everything, and one forward for the whole prompt.
  engine::EngineConfig engine_cfg;
  engine_cfg.max_model_len = max_tokens + 1;
  engine_cfg.max_num_batched_tokens = std::max<int64_t>(max_tokens, 1);
  engine_cfg.enable_prefix_caching = false;
  QS_ASSIGN_OR_RETURN(engine_cfg.kv_cache_dtype, kv_cache_dtype_from_flags(flags));
  QS_ASSIGN_OR_RETURN(
      engine_cfg.kv_cache_bytes,
      engine::kv_cache_bytes_for_tokens(model->local_config(), engine_cfg.max_model_len,
                                        engine_cfg.block_size, engine_cfg.kv_cache_dtype));

  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token_dist(0, static_cast<int32_t>(cfg.vocab_size - 1));
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = token_dist(rng);
    return t;
  };

  nlohmann::json results = nlohmann::json::array();
  // `--json -` makes stdout pure JSON (as llama-bench -o json); the table then goes to stderr.
  const bool json_to_stdout = flags.get("json") == "-";
  FILE* table = json_to_stdout ? stderr : stdout;
  std::fprintf(table,
               "| model | resident MiB | threads | test | t/s | roofline |\n"
               "|---|---:|---:|---|---:|---:|\n");
  for (int threads : threads_list) {
    ThreadPool pool(threads == 0 ? ThreadPool::default_threads() : threads);
    QS_ASSIGN_OR_RETURN(
        auto engine, engine::Engine::create(*model, /*tokenizer=*/nullptr, {}, pool, engine_cfg));
    struct Test {
      std::string name;
      int n;
      bool prefill;
    };
    std::vector<Test> tests;
    for (int n : input_lens)
      if (n > 0) tests.push_back({"pp" + std::to_string(n), n, true});
    for (int n : output_lens)
      if (n > 0) tests.push_back({"tg" + std::to_string(n), n, false});
    for (const Test& test : tests) {
      // Warm-up: pages the weights in and settles the thread pool.
      QS_RETURN_IF_ERROR(
          run_once(*engine, random_tokens(std::min(test.n, 16)), test.prefill).status());
      const double bw_before =
          roofline && !test.prefill
              ? ops::measure_read_bandwidth_gbs(pool, ops::bandwidth_probe_bytes(), 3)
              : 0;
      std::vector<double> tps;
      double timed_s = 0;
      if (tp != nullptr) tp->reset_stats();
      for (int64_t r = 0; r < reps; ++r) {
        QS_ASSIGN_OR_RETURN(double dt, run_once(*engine, random_tokens(test.n), test.prefill));
        tps.push_back(test.n / dt);
        timed_s += dt;
      }
      // Rank 0's time in collectives (waiting for the other ranks included) over the timed runs.
      const dist::Communicator::Stats comm =
          tp != nullptr ? tp->stats() : dist::Communicator::Stats{};
      const double bw_after = roofline && !test.prefill ? ops::measure_read_bandwidth_gbs(
                                                              pool, ops::bandwidth_probe_bytes(), 3)
                                                        : 0;
      const Stats s = mean_sd(tps);
      nlohmann::json r = {{"model", dir},
                          {"architecture", cfg.architecture},
                          {"threads", pool.n_threads()},
                          {"tensor_parallel_size", tp != nullptr ? tp->size() : 1},
                          {"test", test.name},
                          {"n_tokens", test.n},
                          {"repetitions", reps},
                          {"tokens_per_second_mean", s.mean},
                          {"tokens_per_second_sd", s.sd},
                          {"samples_tokens_per_second", tps},
                          {"quantization", quant.method()},
                          {"weights", weights},
                          {"resident_weight_bytes", resident_bytes},
                          {"weight_bytes_per_token", bytes_per_token},
                          {"isa", ops::active_kernel_isa()}};
      if (tp != nullptr) {
        r["collective_seconds"] = comm.seconds;
        r["collective_share"] = comm.seconds / timed_s;
        r["collective_calls_per_token"] = static_cast<double>(comm.calls) / (reps * test.n);
        r["collective_bytes_per_token"] = static_cast<double>(comm.bytes) / (reps * test.n);
      }
      std::string roof = "";
      if (roofline && !test.prefill) {
        const double bw = 0.5 * (bw_before + bw_after);
        const double achieved = s.mean * static_cast<double>(bytes_per_token) / 1e9;
        r["read_bandwidth_gbs_before"] = bw_before;
        r["read_bandwidth_gbs_after"] = bw_after;
        r["achieved_weight_gbs"] = achieved;
        r["roofline_fraction"] = achieved / bw;
        // Weights that fit the last-level cache can be read from it, not from DRAM: their
        // roofline fraction is not a bandwidth figure, and may pass 100%.
        const size_t llc = ops::last_level_cache_bytes();
        const bool in_cache = llc > 0 && static_cast<size_t>(bytes_per_token) <= llc;
        r["weights_fit_in_cache"] = in_cache;
        r["last_level_cache_bytes"] = llc;
        char buf[128];
        std::snprintf(buf, sizeof(buf), "%.0f%% of %.1f GB/s%s", 100.0 * achieved / bw, bw,
                      in_cache ? " (weights fit in cache)" : "");
        roof = buf;
      }
      std::fprintf(table, "| %s | %.1f | %d | %s | %.2f ± %.2f | %s |\n", cfg.architecture.c_str(),
                   resident_bytes / 1048576.0, pool.n_threads(), test.name.c_str(), s.mean, s.sd,
                   roof.c_str());
      if (tp != nullptr) {
        std::fprintf(
            table,
            "|   tensor parallel %d ranks: collectives %.1f %% of the time, %.0f calls and "
            "%.1f KiB per token on rank 0 |||||||\n",
            tp->size(), 100.0 * comm.seconds / timed_s,
            static_cast<double>(comm.calls) / (reps * test.n),
            static_cast<double>(comm.bytes) / (reps * test.n) / 1024.0);
      }
      std::fflush(table);
      results.push_back(r);
    }
  }
  if (json_to_stdout) {
    std::printf("%s\n", results.dump(2).c_str());
  } else if (flags.has("json")) {
    QS_RETURN_IF_ERROR(write_json(flags.get("json"), results));
    std::fprintf(stderr, "bench: wrote %s\n", flags.get("json").c_str());
  }
  return ok_status();
}

}  // namespace

int cmd_bench(const Args& args) {
  const std::string usage_text =
      "usage: quantserve bench latency|serve|throughput|matrix [options]\n\n"
      "`bench latency` times prefill (ppN) and decode (tgN) of one sequence, llama-bench style.\n"
      "`bench serve` is vLLM's serving benchmark client against an OpenAI-compatible server.\n"
      "`bench throughput` is vLLM's offline throughput benchmark on the in-process engine.\n"
      "`bench matrix` runs `bench serve` against `serve` children: scheme x KV memory x "
      "concurrency.\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s", usage_text.c_str());
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "serve") return bench_serve(Args(args.begin() + 1, args.end()));
  if (args[0] == "throughput") return bench_throughput(Args(args.begin() + 1, args.end()));
  if (args[0] == "matrix") return bench_matrix(Args(args.begin() + 1, args.end()));
  if (args[0] != "latency") {
    std::fprintf(stderr,
                 "bench: unknown benchmark '%s' (known: latency, serve, throughput, matrix)\n",
                 args[0].c_str());
    return 2;
  }
  Flags flags;
  flags.add("model", "checkpoint directory")
      .add("input-len", "prompt lengths to prefill, comma-separated (0 skips)", false, "512")
      .add("output-len", "tokens to decode, comma-separated (0 skips)", false, "128")
      .add("threads", "thread counts, comma-separated (0 = all cores)", false, "0")
      .add("repetitions", "timed runs per test", false, "5")
      .add("json", "also write the results as JSON to this file (- = stdout, table to stderr)")
      .add("no-roofline", "skip the bandwidth probes around decode tests", true);
  add_model_flags(flags);
  add_kv_cache_dtype_flag(flags);
  add_tensor_parallel_flags(flags);
  if (Status s = flags.parse(Args(args.begin() + 1, args.end())); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n\n%s", s.message().c_str(),
                 flags.usage("bench latency").c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s\n%s", usage_text.c_str(), flags.usage("bench latency").c_str());
    return 0;
  }
  if (Status s = bench_latency(flags); !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace qs::apps
