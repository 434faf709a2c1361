// tests: running the built quantserve binary (QS_BINARY) from a test, for the suites that
// drive the CLI end to end.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace qs::testing {

struct CliResult {
  int exit_code;       // -1 when the process did not exit normally
  std::string output;  // stdout, and stderr too unless left out
};

// `args` are shell words after the binary; `stderr_too` = false keeps stderr out of `output`
// (for commands that print JSON on stdout).
inline CliResult run_cli(const std::string& args, bool stderr_too = true) {
  const std::string cmd =
      std::string(QS_BINARY) + " " + args + (stderr_too ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace qs::testing
