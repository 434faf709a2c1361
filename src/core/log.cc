// core: stderr logger with a process-wide level (QS_LOG_LEVEL=debug|info|warn|error).
#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qs {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("QS_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kWarn;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kWarn;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) {
  level_storage().store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}

void log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < level_storage().load()) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  char buf[4096];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  std::fprintf(stderr, "[quantserve %s] %s\n", kNames[static_cast<int>(level)], buf);
}

}  // namespace qs
