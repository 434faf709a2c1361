// Test helpers for io/quant_config: parse a literal JSON config and compare schemes field by
// field with a readable failure message (no dependency on QuantScheme::describe).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "io/quant_config.h"

namespace qs::io::testing {

inline std::string show(const formats::QuantScheme& s) {
  return "{layout " + std::to_string(static_cast<int>(s.layout)) + ", bits " +
         std::to_string(s.bits) + ", group " + std::to_string(s.group_size) +
         (s.sym ? ", sym" : ", asym") + (s.zero_minus_one ? ", zero-1" : "") +
         (s.desc_act ? ", desc_act" : "") + ", block " + std::to_string(s.block_n) + "x" +
         std::to_string(s.block_k) + "}";
}

inline ::testing::AssertionResult same(const formats::QuantScheme& a,
                                       const formats::QuantScheme& b) {
  if (a.layout == b.layout && a.bits == b.bits && a.group_size == b.group_size && a.sym == b.sym &&
      a.zero_minus_one == b.zero_minus_one && a.desc_act == b.desc_act && a.block_n == b.block_n &&
      a.block_k == b.block_k) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << show(a) << " != " << show(b);
}

inline formats::QuantScheme scheme(formats::Layout layout, int bits, int64_t group, bool sym,
                                   bool zero_minus_one = false, bool desc_act = false) {
  return {.layout = layout,
          .bits = bits,
          .group_size = group,
          .sym = sym,
          .zero_minus_one = zero_minus_one,
          .desc_act = desc_act};
}

inline formats::QuantScheme fp8(int64_t group, int64_t block_n = 0, int64_t block_k = 0) {
  formats::QuantScheme s = scheme(formats::Layout::kFp8, 8, group, true);
  s.block_n = block_n;
  s.block_k = block_k;
  return s;
}

// `s` with declared activations (W8A8).
inline formats::QuantScheme with_act(formats::QuantScheme s, formats::ActType type,
                                     formats::ActStrategy strategy, bool dynamic, int64_t group = 0,
                                     bool sym = true) {
  s.act.type = type;
  s.act.strategy = strategy;
  s.act.dynamic = dynamic;
  s.act.group_size = group;
  s.act.sym = sym;
  return s;
}

inline const formats::QuantScheme kDense{};

// Module names the tests ask scheme_for about.
inline const char* const kQ = "model.layers.0.self_attn.q_proj";
inline const char* const kDown = "model.layers.0.mlp.down_proj";
inline const char* const kRouter = "model.layers.0.mlp.gate";

inline bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Parses `text` as one quantization_config from `source`; a failure is a test failure.
inline QuantConfig parse_ok(const std::string& text, const std::string& source = "config.json") {
  auto r = parse_quant_config(nlohmann::json::parse(text), source);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : QuantConfig{};
}

// Parses `text` expecting an error; returns its message ("" when it parsed).
inline std::string parse_error(const std::string& text, const std::string& source = "config.json") {
  auto r = parse_quant_config(nlohmann::json::parse(text), source);
  EXPECT_FALSE(r.ok()) << "parsed: " << r->summary();
  return r.ok() ? "" : r.status().message();
}

}  // namespace qs::io::testing
