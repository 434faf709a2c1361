// core: always-on invariant checks for our own code (never for user input, which gets a
// Status). A failed check prints file:line and the condition, then aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace qs::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const char* msg) {
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file, line, cond, msg[0] ? ": " : "", msg);
  std::abort();
}
}  // namespace qs::detail

#define QS_CHECK(cond)                                                      \
  do {                                                                      \
    if (!(cond)) ::qs::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define QS_CHECK_MSG(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::qs::detail::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)
