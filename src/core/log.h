// core: diagnostics to stderr. stdout belongs to program output (a completion, JSON), so
// nothing in the library ever prints there.
#pragma once

#include <cstdarg>

namespace qs {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace qs

#define QS_LOG_DEBUG(...) ::qs::log(::qs::LogLevel::kDebug, __VA_ARGS__)
#define QS_LOG_INFO(...) ::qs::log(::qs::LogLevel::kInfo, __VA_ARGS__)
#define QS_LOG_WARN(...) ::qs::log(::qs::LogLevel::kWarn, __VA_ARGS__)
#define QS_LOG_ERROR(...) ::qs::log(::qs::LogLevel::kError, __VA_ARGS__)
