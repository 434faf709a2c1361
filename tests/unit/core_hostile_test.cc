// unit: regressions for undefined behaviour that input could reach in core (issue 9): ±inf into
// fp8 e4m3, a Result built from an ok Status, and the one place shape products are checked.
// Each case replays the input that failed before its fix (under UBSan, for the float casts).
#include <cmath>
#include <limits>
#include <new>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/limits.h"
#include "core/status.h"
#include "core/tensor.h"

// AddressSanitizer aborts on an allocation larger than it supports unless told to return null,
// which is what the allocator does without it and what TensorTooBigForMemoryThrowsBadAlloc
// tests; ASAN_OPTIONS from the environment still override this default.
#if defined(__SANITIZE_ADDRESS__)
#define QS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QS_TEST_ASAN 1
#endif
#endif
#ifdef QS_TEST_ASAN
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}
#endif

namespace qs {
namespace {

TEST(HostileCore, Fp8E4m3SaturatesInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_fp8_e4m3(inf), 0x7e);  // 448, E4M3 has no infinity
  EXPECT_EQ(f32_to_fp8_e4m3(-inf), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::max()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-416.0f), 0xfd);
}

TEST(HostileCoreDeathTest, ResultFromOkStatusAbortsInReleaseBuilds) {
  // With NDEBUG the old assert vanished and value() read an empty optional.
  EXPECT_DEATH({ Result<int> r(ok_status()); }, "Result built from an ok Status");
}

TEST(HostileCore, CheckedNumel) {
  EXPECT_EQ(*limits::checked_numel({}, "t"), 1);
  EXPECT_EQ(*limits::checked_numel({3, 0, 5}, "t"), 0);
  EXPECT_EQ(*limits::checked_numel({1 << 20, 1 << 20}, "t"), int64_t{1} << 40);
  auto big = limits::checked_numel({int64_t{1} << 32, int64_t{1} << 32}, "tensor 'w'");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("tensor 'w': shape [4294967296, 4294967296] has more"),
            std::string::npos)
      << big.status().message();
  // A zero does not hide an overflowing dimension after it.
  EXPECT_FALSE(limits::checked_numel({0, INT64_MAX, INT64_MAX}, "t").ok());
  EXPECT_FALSE(limits::checked_numel({2, -1}, "t").ok());
  EXPECT_FALSE(limits::checked_numel(std::vector<int64_t>(9, 1), "t").ok());
}

TEST(HostileCore, CheckAtMostNamesFieldAndLimit) {
  EXPECT_TRUE(limits::check_at_most(1024, 1024, "x").ok());
  Status s = limits::check_at_most(5000, 1024, "config field 'num_hidden_layers'");
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), "config field 'num_hidden_layers' is 5000, above the limit of 1024");
}

TEST(HostileCoreDeathTest, MappedViewsHaveNoWritablePointer) {
  static const float bytes[4] = {1, 2, 3, 4};
  Tensor view;
  view.shape = {4};
  view.data = bytes;  // what a read-only mapping hands out
  EXPECT_EQ(view.ptr<float>()[2], 3.0f);
  EXPECT_DEATH(view.mutable_ptr<float>(), "read-only view");
  Tensor owned = Tensor::zeros(DType::kF32, {4});
  owned.mutable_ptr<float>()[1] = 5.0f;
  EXPECT_EQ(owned.ptr<float>()[1], 5.0f);
}

// A KV cache or a tensor too big for memory: the allocation failure reaches the caller as
// std::bad_alloc (Python's MemoryError) instead of a QS_CHECK abort (issue 35). 2^52 bytes is
// past the 47-bit user address space, so no overcommit setting can grant it.
TEST(HostileCore, TensorTooBigForMemoryThrowsBadAlloc) {
  EXPECT_THROW(Tensor::zeros(DType::kF32, {int64_t{1} << 25, int64_t{1} << 25}), std::bad_alloc);
  EXPECT_EQ(Tensor::zeros(DType::kBF16, {3}).nbytes(), 6u);  // and small ones still work
}

}  // namespace
}  // namespace qs
