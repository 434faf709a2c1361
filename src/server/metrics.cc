// server: Prometheus registry and vLLM's metric set (see metrics.h).
#include "server/metrics.h"

#include <charconv>
#include <cmath>

#include "core/check.h"

namespace qs::server {

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  QS_CHECK(ec == std::errc());
  std::string s(buf, end);
  // prometheus_client writes whole numbers as 1.0; keep that look for bucket bounds.
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string format_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  return out + "}";
}

void MetricsRegistry::define(const std::string& name, const std::string& help, MetricType type,
                             std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  QS_CHECK_MSG(!families_.count(name), "metric defined twice");
  Family f;
  f.help = help;
  f.type = type;
  f.bounds = std::move(bounds);
  families_.emplace(name, std::move(f));
  order_.push_back(name);
}

MetricsRegistry::Series& MetricsRegistry::series(const std::string& name, const Labels& labels,
                                                 MetricType expected) {
  auto it = families_.find(name);
  QS_CHECK_MSG(it != families_.end(), "metric used before it was defined");
  Family& f = it->second;
  QS_CHECK_MSG(f.type == expected, "metric used as the wrong type");
  Series& s = f.series[format_labels(labels)];
  if (s.labels.empty() && !labels.empty()) s.labels = labels;
  if (f.type == MetricType::kHistogram && s.buckets.empty()) s.buckets.assign(f.bounds.size(), 0);
  return s;
}

void MetricsRegistry::add(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  QS_CHECK_MSG(it != families_.end(), "metric used before it was defined");
  QS_CHECK_MSG(it->second.type != MetricType::kCounter || v >= 0, "counters only go up");
  series(name, labels, it->second.type).value += v;
}

void MetricsRegistry::set(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  QS_CHECK_MSG(it != families_.end(), "metric used before it was defined");
  series(name, labels, it->second.type).value = v;
}

void MetricsRegistry::observe(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series(name, labels, MetricType::kHistogram);
  const std::vector<double>& bounds = families_.at(name).bounds;
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (v <= bounds[i]) {
      ++s.buckets[i];
      break;
    }
  }
  s.sum += v;
  ++s.count;
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& f = families_.at(name);
    const char* type = f.type == MetricType::kCounter ? "counter"
                       : f.type == MetricType::kGauge ? "gauge"
                                                      : "histogram";
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    for (const auto& [label_text, s] : f.series) {
      if (f.type == MetricType::kCounter) {
        out += name + "_total" + label_text + " " + format_metric_value(s.value) + "\n";
      } else if (f.type == MetricType::kGauge) {
        out += name + label_text + " " + format_metric_value(s.value) + "\n";
      } else {
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= f.bounds.size(); ++i) {
          cumulative += i < f.bounds.size() ? s.buckets[i] : 0;
          Labels with_le = s.labels;
          const double le = i < f.bounds.size() ? f.bounds[i] : INFINITY;
          with_le.emplace_back("le", format_metric_value(le));
          out +=
              name + "_bucket" + format_labels(with_le) + " " +
              format_metric_value(static_cast<double>(i < f.bounds.size() ? cumulative : s.count)) +
              "\n";
        }
        out += name + "_sum" + label_text + " " + format_metric_value(s.sum) + "\n";
        out += name + "_count" + label_text + " " +
               format_metric_value(static_cast<double>(s.count)) + "\n";
      }
    }
  }
  return out;
}

namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value.
std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (double scale = 1;; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > static_cast<double>(max_value)) return out;
      out.push_back(m * scale);
    }
  }
}

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : model_{{"model_name", std::move(model_name)}} {
  MetricsRegistry& r = registry_;
  r.define("vllm:num_requests_running", "Number of requests in model execution batches.",
           MetricType::kGauge);
  r.define("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
           MetricType::kGauge);
  r.define("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
           MetricType::kGauge);
  // The V0 / early-V1 name of the same gauge; older dashboards still read it.
  r.define("vllm:gpu_cache_usage_perc",
           "KV-cache usage. 1 means 100 percent usage. Deprecated: use kv_cache_usage_perc.",
           MetricType::kGauge);
  r.define("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
           MetricType::kCounter);
  r.define("vllm:prefix_cache_queries",
           "Prefix cache queries, in terms of number of queried tokens.", MetricType::kCounter);
  r.define("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
           MetricType::kCounter);
  r.define("vllm:prompt_tokens", "Number of prefill tokens processed.", MetricType::kCounter);
  r.define("vllm:generation_tokens", "Number of generation tokens processed.",
           MetricType::kCounter);
  r.define("vllm:request_success", "Count of successfully processed requests.",
           MetricType::kCounter);
  r.define("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
           MetricType::kHistogram, buckets_1_2_5(max_model_len));
  r.define("vllm:request_generation_tokens", "Number of generation tokens processed.",
           MetricType::kHistogram, buckets_1_2_5(max_model_len));
  r.define("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
           MetricType::kHistogram, kTtftBuckets);
  r.define("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
           MetricType::kHistogram, kItlBuckets);
  // The older name of the same observations (vLLM deprecated it for the one above).
  r.define("vllm:time_per_output_token_seconds",
           "Histogram of time per output token in seconds. Deprecated: use "
           "inter_token_latency_seconds.",
           MetricType::kHistogram, kItlBuckets);
  r.define("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
           MetricType::kHistogram, kRequestLatencyBuckets);
  // Not vLLM's: what a Mixture-of-Experts model's batching buys (0 for dense models).
  r.define("quantserve:moe_routed_slots",
           "MoE (token, expert) pairs routed, over all MoE layers and steps.",
           MetricType::kCounter);
  r.define("quantserve:moe_expert_reads",
           "MoE expert weight reads: one per expert chosen by any token of a step, per layer.",
           MetricType::kCounter);
  // Series that exist before any traffic, so a first scrape already lists them.
  set_engine_stats(EngineStats());
  for (const char* name : {"vllm:prompt_tokens", "vllm:generation_tokens"}) r.add(name, model_, 0);
  for (const char* reason : {"stop", "length", "abort"}) {
    Labels l = model_;
    l.emplace_back("finished_reason", reason);
    r.add("vllm:request_success", l, 0);
  }
}

void ServerMetrics::add_prompt_tokens(int64_t n) {
  registry_.add("vllm:prompt_tokens", model_, static_cast<double>(n));
}

void ServerMetrics::add_generation_tokens(int64_t n) {
  registry_.add("vllm:generation_tokens", model_, static_cast<double>(n));
}

void ServerMetrics::observe_ttft(double seconds) {
  registry_.observe("vllm:time_to_first_token_seconds", model_, seconds);
}

void ServerMetrics::observe_inter_token_latency(double seconds) {
  registry_.observe("vllm:inter_token_latency_seconds", model_, seconds);
  registry_.observe("vllm:time_per_output_token_seconds", model_, seconds);
}

void ServerMetrics::request_finished(const std::string& finish_reason, double e2e_seconds,
                                     int64_t prompt_tokens, int64_t generation_tokens) {
  Labels l = model_;
  l.emplace_back("finished_reason", finish_reason);
  registry_.add("vllm:request_success", l, 1);
  registry_.observe("vllm:e2e_request_latency_seconds", model_, e2e_seconds);
  registry_.observe("vllm:request_prompt_tokens", model_, static_cast<double>(prompt_tokens));
  registry_.observe("vllm:request_generation_tokens", model_,
                    static_cast<double>(generation_tokens));
}

void ServerMetrics::enable_transcription_metrics() {
  std::call_once(transcription_metrics_, [this] {
    // Not vLLM's (it has no audio metrics): what a Whisper server has done.
    registry_.define("quantserve:transcription_requests", "Transcriptions answered.",
                     MetricType::kCounter);
    registry_.define("quantserve:transcription_audio_seconds", "Seconds of audio transcribed.",
                     MetricType::kCounter);
    registry_.add("quantserve:transcription_requests", model_, 0);
    registry_.add("quantserve:transcription_audio_seconds", model_, 0);
  });
}

void ServerMetrics::transcription_finished(double audio_seconds, double e2e_seconds,
                                           int64_t generated_tokens) {
  registry_.add("quantserve:transcription_requests", model_, 1);
  registry_.add("quantserve:transcription_audio_seconds", model_, audio_seconds);
  add_generation_tokens(generated_tokens);
  request_finished("stop", e2e_seconds, 0, generated_tokens);
}

void ServerMetrics::set_engine_stats(const EngineStats& s) {
  registry_.set("vllm:num_requests_running", model_, static_cast<double>(s.num_running));
  registry_.set("vllm:num_requests_waiting", model_, static_cast<double>(s.num_waiting));
  registry_.set("vllm:kv_cache_usage_perc", model_, s.kv_cache_usage());
  registry_.set("vllm:gpu_cache_usage_perc", model_, s.kv_cache_usage());
  registry_.set("vllm:num_preemptions", model_, static_cast<double>(s.preemptions));
  registry_.set("vllm:prefix_cache_queries", model_, static_cast<double>(s.prefix_cache_queries));
  registry_.set("vllm:prefix_cache_hits", model_, static_cast<double>(s.prefix_cache_hits));
  registry_.set("quantserve:moe_routed_slots", model_, static_cast<double>(s.moe_routed_slots));
  registry_.set("quantserve:moe_expert_reads", model_, static_cast<double>(s.moe_expert_reads));
}

}  // namespace qs::server
