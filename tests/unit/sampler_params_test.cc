// tests: SamplingParams::validate accepts vLLM's ranges and rejects the rest with messages
// that name the parameter and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/sampler.h"

namespace qs {
namespace {

constexpr int64_t kVocab = 1000;

void expect_error(const SamplingParams& p, const std::string& fragment) {
  const Status s = p.validate(kVocab);
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams{}.validate(kVocab).ok());
}

TEST(SamplingParamsTest, BoundaryValuesAreValid) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 1.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 1;
  p.stop_token_ids = {0, kVocab - 1};
  EXPECT_TRUE(p.validate(kVocab).ok());
  p.top_k = kVocab * 10;  // larger than the vocabulary means all of it
  p.temperature = 2.0f;
  EXPECT_TRUE(p.validate(kVocab).ok());
}

TEST(SamplingParamsTest, RejectsOutOfRange) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams p;
  p.temperature = -0.5f;
  expect_error(p, "temperature must be in [0, 2], got -0.5");
  p.temperature = nan;
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0.0f;
  expect_error(p, "top_p must be in (0, 1], got 0");
  p.top_p = 1.5f;
  expect_error(p, "top_p must be in (0, 1], got 1.5");
  p.top_p = nan;
  expect_error(p, "top_p");
  p = {};
  p.top_k = -2;
  expect_error(p, "top_k must be 0 or -1 (disable), or at least 1, got -2");
  p = {};
  p.min_p = 1.01f;
  expect_error(p, "min_p must be in [0, 1]");
  p = {};
  p.repetition_penalty = 0.0f;
  expect_error(p, "repetition_penalty must be a finite number greater than zero, got 0");
  p.repetition_penalty = std::numeric_limits<float>::infinity();
  expect_error(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 2.5f;
  expect_error(p, "presence_penalty must be in [-2, 2], got 2.5");
  p = {};
  p.frequency_penalty = -3.0f;
  expect_error(p, "frequency_penalty must be in [-2, 2], got -3");
  p = {};
  p.max_tokens = 0;
  expect_error(p, "max_tokens must be at least 1, got 0");
  p = {};
  p.stop = {"ok", ""};
  expect_error(p, "stop cannot contain an empty string");
  p = {};
  p.stop_token_ids = {5, kVocab};
  expect_error(p, "stop_token_ids contains 1000, outside the vocabulary [0, 1000)");
  p.stop_token_ids = {-1};
  expect_error(p, "stop_token_ids contains -1");
}

TEST(SamplingParamsTest, GreedyBelowEpsilon) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 0.5e-5f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 1e-4f;
  EXPECT_FALSE(p.is_greedy());
}

}  // namespace
}  // namespace qs
