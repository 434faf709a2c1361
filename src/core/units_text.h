// core: byte and parameter counts as people read them in tables ("14.19 GiB", "7.616 B"),
// shared by `inspect`'s memory tables (the LLM's, a diffusion pipeline's, a multimodal
// checkpoint's parts).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace qs {

inline std::string bytes_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  } else if (bytes >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  }
  return buf;
}

inline std::string params_text(int64_t n) {
  char buf[32];
  if (n >= 1000000000) {
    std::snprintf(buf, sizeof(buf), "%.3f B", static_cast<double>(n) / 1e9);
  } else if (n >= 1000000) {
    std::snprintf(buf, sizeof(buf), "%.2f M", static_cast<double>(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f K", static_cast<double>(n) / 1e3);
  }
  return buf;
}

}  // namespace qs
