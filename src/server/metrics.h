// server: a small Prometheus registry (counters, gauges, histograms with labels) rendered in
// the text exposition format 0.0.4, and ServerMetrics, which defines vLLM's metric names
// (docs/design/metrics.md: the `vllm:` prefix, a `model_name` label, vLLM's histogram
// buckets) so dashboards and `vllm bench serve` built for vLLM read quantserve unchanged.
// Thread-safe: HTTP threads and the engine thread record while /metrics renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/backend.h"

namespace qs::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

class MetricsRegistry {
 public:
  // A counter's name is given without `_total`: its TYPE line uses the bare name and its
  // sample gets the suffix, as prometheus_client writes them. Histogram bounds are the
  // finite upper bounds in increasing order; +Inf is added.
  void define(const std::string& name, const std::string& help, MetricType type,
              std::vector<double> bounds = {});

  void add(const std::string& name, const Labels& labels, double v);      // counter or gauge
  void set(const std::string& name, const Labels& labels, double v);      // gauge, or a mirrored
                                                                          // cumulative counter
  void observe(const std::string& name, const Labels& labels, double v);  // histogram

  std::string render() const;

 private:
  struct Series {
    Labels labels;
    double value = 0.0;
    std::vector<uint64_t> buckets;  // cumulative on render, per bucket here
    double sum = 0.0;
    uint64_t count = 0;
  };
  struct Family {
    std::string help;
    MetricType type = MetricType::kCounter;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // by rendered label string, for a stable order
  };
  Series& series(const std::string& name, const Labels& labels, MetricType expected);

  mutable std::mutex mu_;
  std::vector<std::string> order_;  // families in definition order
  std::map<std::string, Family> families_;
};

// Formats a sample value or bucket bound as Prometheus does: shortest round-trip decimal,
// +Inf/-Inf/NaN spelled out.
std::string format_metric_value(double v);
// {a="x",b="y"} with \ " and newline escaped; empty for no labels.
std::string format_labels(const Labels& labels);

// vLLM's metrics for one served model.
class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int64_t max_model_len);

  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  void observe_ttft(double seconds);
  void observe_inter_token_latency(double seconds);
  // One finished request (one choice): reason "stop" | "length" | "abort" | "error".
  void request_finished(const std::string& finish_reason, double e2e_seconds, int64_t prompt_tokens,
                        int64_t generation_tokens);
  void set_engine_stats(const EngineStats& stats);

  // A transcription server's own counters (requests, seconds of audio), defined and at zero
  // from the first call on; idempotent.
  void enable_transcription_metrics();
  // One transcript answered: counted by vLLM's request metrics too, as vLLM's transcriptions
  // go through its engine (the decoder's tokens as generation tokens, no prompt tokens).
  void transcription_finished(double audio_seconds, double e2e_seconds, int64_t generated_tokens);

  std::string render() const { return registry_.render(); }
  const MetricsRegistry& registry() const { return registry_; }

 private:
  Labels model_;
  MetricsRegistry registry_;
  std::once_flag transcription_metrics_;
};

}  // namespace qs::server
