// tests: where the shared test data lives (models, tokenizers and references too large for
// this repository; README "Test data" says where to get it). Tests that need it skip, naming
// the missing path, rather than fail when it is absent. QS_SHARED_DATA_DIR in the environment
// overrides the directory compiled in (CMake's QS_SHARED_DATA_DIR, default ../shared/data).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace qs::testing {

inline std::string shared_data_dir() {
  const char* env = std::getenv("QS_SHARED_DATA_DIR");
  return env != nullptr && env[0] != '\0' ? env : QS_SHARED_DATA_DIR;
}

// "" when shared_data_dir()/relative exists, else the reason to skip.
inline std::string shared_data_missing(const std::string& relative) {
  const std::string path = shared_data_dir() + "/" + relative;
  if (std::filesystem::exists(path)) return "";
  return "needs the shared test data " + path +
         " (absent; see README.md \"Test data\", or set QS_SHARED_DATA_DIR)";
}

// Skips every test of this binary when `relative` is missing: for test files that all need it.
class SharedDataEnvironment : public ::testing::Environment {
 public:
  explicit SharedDataEnvironment(std::string relative) : relative_(std::move(relative)) {}
  void SetUp() override {
    const std::string missing = shared_data_missing(relative_);
    if (!missing.empty()) GTEST_SKIP() << missing;
  }

 private:
  std::string relative_;
};

}  // namespace qs::testing

// In a test body: skip this test when shared_data_dir()/relative is missing.
#define QS_SKIP_WITHOUT_SHARED_DATA(relative)                                     \
  do {                                                                            \
    const std::string qs_missing_ = ::qs::testing::shared_data_missing(relative); \
    if (!qs_missing_.empty()) GTEST_SKIP() << qs_missing_;                        \
  } while (0)

// At namespace scope: skip the whole binary when shared_data_dir()/relative is missing.
#define QS_SHARED_DATA_FOR_ALL_TESTS(relative)                                \
  [[maybe_unused]] static ::testing::Environment* const qs_shared_data_env_ = \
      ::testing::AddGlobalTestEnvironment(new ::qs::testing::SharedDataEnvironment(relative))
