// tests: reading the golden fixtures that the generator scripts in scripts/golden/ write: a
// directory per fixture with reference.json, and raw little-endian f32 arrays (logits,
// dequantized weights) addressed by byte offset.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace qs::testing {

// `count` floats at `offset_bytes` of `file`.
inline std::vector<float> read_floats(const std::filesystem::path& file, int64_t offset_bytes,
                                      int64_t count) {
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset_bytes);
  std::vector<float> v(count);
  in.read(reinterpret_cast<char*>(v.data()), count * 4);
  EXPECT_TRUE(in.good()) << file;
  return v;
}

inline int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// Top-1 minus top-2 of one logits row.
inline float top2_margin(const float* x, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > a) {
      b = a;
      a = x[i];
    } else if (x[i] > b) {
      b = x[i];
    }
  }
  return a - b;
}

// The fixture directories under `root` (those holding a reference.json), sorted; empty when
// `root` is missing, which the suites' coverage tests then report.
inline std::vector<std::string> fixture_names(const std::filesystem::path& root) {
  std::vector<std::string> names;
  if (!std::filesystem::exists(root)) return names;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(e.path() / "reference.json")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace qs::testing
