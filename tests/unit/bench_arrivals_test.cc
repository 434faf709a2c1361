// bench: arrival gaps have the moments of Gamma(burstiness, 1/(rate*burstiness)) and send
// offsets end at n/rate, as vLLM's get_request.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench_client/arrivals.h"

namespace qs::bench {
namespace {

struct Moments {
  double mean = 0, var = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= v.size();
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= (v.size() - 1);
  return m;
}

// Gamma(k, theta) has mean k*theta and variance k*theta^2; with theta = 1/(rate*k) that is
// mean 1/rate and variance 1/(rate^2 k). The bounds are about four standard errors at n = 40000
// (the sample variance of a shape-0.25 gamma has relative error sqrt((2 + 6/k)/n) = 2.5%).
void expect_gamma_moments(double rate, double burstiness) {
  auto gaps = inter_arrival_gaps(40000, rate, burstiness, /*seed=*/7);
  ASSERT_TRUE(gaps.ok()) << gaps.status().message();
  const Moments m = moments(*gaps);
  const double want_mean = 1.0 / rate, want_var = 1.0 / (rate * rate * burstiness);
  EXPECT_NEAR(m.mean, want_mean, 0.03 * want_mean) << "burstiness " << burstiness;
  EXPECT_NEAR(m.var, want_var, 0.10 * want_var) << "burstiness " << burstiness;
  for (double g : *gaps) ASSERT_GT(g, 0.0);
}

TEST(BenchArrivals, PoissonGapsAreExponential) {
  expect_gamma_moments(4.0, 1.0);
}
TEST(BenchArrivals, BurstyGapsHaveLargerVariance) {
  expect_gamma_moments(4.0, 0.25);
}
TEST(BenchArrivals, SmoothGapsHaveSmallerVariance) {
  expect_gamma_moments(2.0, 4.0);
}
TEST(BenchArrivals, FractionalShapeAboveOne) {
  expect_gamma_moments(10.0, 2.5);
}

TEST(BenchArrivals, SameSeedSameGapsOtherSeedOther) {
  auto a = inter_arrival_gaps(100, 3.0, 1.0, 1), b = inter_arrival_gaps(100, 3.0, 1.0, 1),
       c = inter_arrival_gaps(100, 3.0, 1.0, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(BenchArrivals, InfiniteBurstinessIsConstantGaps) {
  auto gaps = inter_arrival_gaps(10, 5.0, std::numeric_limits<double>::infinity(), 0);
  ASSERT_TRUE(gaps.ok());
  for (double g : *gaps) EXPECT_DOUBLE_EQ(g, 0.2);
}

TEST(BenchArrivals, InfiniteRateSendsEverythingAtOnce) {
  auto t = arrival_offsets(5, std::numeric_limits<double>::infinity(), 1.0, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, std::vector<double>(5, 0.0));
}

TEST(BenchArrivals, OffsetsRescaledToEndAtNOverRate) {
  auto t = arrival_offsets(50, 8.0, 0.5, 3);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 50u);
  EXPECT_GT(t->front(), 0.0);
  for (size_t i = 1; i < t->size(); ++i) EXPECT_GE((*t)[i], (*t)[i - 1]);
  EXPECT_NEAR(t->back(), 50.0 / 8.0, 1e-12);
}

TEST(BenchArrivals, RejectsNonPositiveRateAndBurstiness) {
  EXPECT_FALSE(arrival_offsets(3, 0.0, 1.0, 0).ok());
  EXPECT_FALSE(arrival_offsets(3, -1.0, 1.0, 0).ok());
  EXPECT_FALSE(arrival_offsets(3, 1.0, 0.0, 0).ok());
  EXPECT_FALSE(inter_arrival_gaps(3, std::numeric_limits<double>::infinity(), 1.0, 0).ok());
}

}  // namespace
}  // namespace qs::bench
