// server: the data-parallel front end's /metrics (see dp_metrics.h).
#include "server/dp_metrics.h"

#include <map>

#include "server/metrics.h"

namespace qs::server {
namespace {

// A family as the text format writes it: HELP and TYPE lines, then its samples.
struct ExpositionFamily {
  std::string help_line;
  std::string type_line;
  std::vector<std::string> samples;
};

bool metric_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ':';
}

// `name{a="x"} 1` -> `name{replica="i",a="x"} 1`; `name 1` -> `name{replica="i"} 1`.
std::string with_replica_label(const std::string& sample, int replica) {
  size_t end = 0;
  while (end < sample.size() && metric_name_char(sample[end])) ++end;
  const std::string label = "replica=\"" + std::to_string(replica) + "\"";
  if (end < sample.size() && sample[end] == '{') {
    const bool empty = end + 1 < sample.size() && sample[end + 1] == '}';
    return sample.substr(0, end + 1) + label + (empty ? "" : ",") + sample.substr(end + 1);
  }
  return sample.substr(0, end) + "{" + label + "}" + sample.substr(end);
}

// The family a `# HELP name ...` or `# TYPE name ...` line names.
std::string comment_family(const std::string& line) {
  const size_t start = 7;  // after "# HELP " / "# TYPE "
  const size_t end = line.find(' ', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace

std::string merge_replica_metrics(const std::vector<std::pair<int, std::string>>& replicas) {
  std::vector<std::string> order;
  std::map<std::string, ExpositionFamily> families;
  auto family = [&](const std::string& name) -> ExpositionFamily& {
    auto [it, inserted] = families.try_emplace(name);
    if (inserted) order.push_back(name);
    return it->second;
  };
  for (const auto& [replica, text] : replicas) {
    std::string current;  // the family of the last HELP/TYPE line
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      const std::string line = text.substr(pos, nl - pos);
      pos = nl + 1;
      if (line.empty()) continue;
      const bool help = line.rfind("# HELP ", 0) == 0;
      if (help || line.rfind("# TYPE ", 0) == 0) {
        current = comment_family(line);
        std::string& kept = help ? family(current).help_line : family(current).type_line;
        if (kept.empty()) kept = line;
        continue;
      }
      if (line[0] == '#') continue;
      if (current.empty()) {
        // An untyped sample before any HELP/TYPE: a family of its own name.
        size_t end = 0;
        while (end < line.size() && metric_name_char(line[end])) ++end;
        family(line.substr(0, end)).samples.push_back(with_replica_label(line, replica));
        continue;
      }
      family(current).samples.push_back(with_replica_label(line, replica));
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const ExpositionFamily& f = families.at(name);
    if (!f.help_line.empty()) out += f.help_line + "\n";
    if (!f.type_line.empty()) out += f.type_line + "\n";
    for (const std::string& s : f.samples) out += s + "\n";
  }
  return out;
}

std::string render_router_metrics(const std::vector<DpReplicaStats>& stats,
                                  const std::string& model_name) {
  MetricsRegistry r;
  r.define("quantserve:dp_requests_routed", "Requests the data-parallel router sent to a replica.",
           MetricType::kCounter);
  r.define("quantserve:dp_prefix_routed_requests",
           "Of those, requests sent for a cached-prefix match rather than for load.",
           MetricType::kCounter);
  r.define("quantserve:dp_requests_in_flight", "Requests a replica is serving through the router.",
           MetricType::kGauge);
  r.define("quantserve:dp_replica_healthy", "1 while a replica takes requests, 0 once it left.",
           MetricType::kGauge);
  for (size_t i = 0; i < stats.size(); ++i) {
    const Labels l = {{"model_name", model_name}, {"replica", std::to_string(i)}};
    r.set("quantserve:dp_requests_routed", l, static_cast<double>(stats[i].routed));
    r.set("quantserve:dp_prefix_routed_requests", l, static_cast<double>(stats[i].prefix_routed));
    r.set("quantserve:dp_requests_in_flight", l, static_cast<double>(stats[i].in_flight));
    r.set("quantserve:dp_replica_healthy", l, stats[i].healthy ? 1.0 : 0.0);
  }
  return r.render();
}

}  // namespace qs::server
