// Latency figures (util/latency_stats.h): the histogram's buckets hold each
// sample once, at the first bound at or above it, and the summary carries
// it beside the mean and the recent p99.
#include "util/latency_stats.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvtier::util {
namespace {

TEST(LatencyStatsTest, EachSampleFallsInTheFirstBucketAtOrAboveIt) {
  LatencyHistogram h;
  h.observe(0);                                    // below every bound: the first
  h.observe(LatencyHistogram::kBoundsSeconds[3]);  // on a bound: that bucket
  h.observe(0.0011);                               // just above it: the next
  h.observe(3600);                                 // above every bound: the last
  EXPECT_EQ(h.buckets[0], 1);
  EXPECT_EQ(h.buckets[3], 1);
  EXPECT_EQ(h.buckets[4], 1);
  EXPECT_EQ(h.buckets.back(), 1);
  EXPECT_EQ(std::accumulate(h.buckets.begin(), h.buckets.end(), 0L), 4);
  EXPECT_EQ(h.count, 4);
  EXPECT_DOUBLE_EQ(h.sum_seconds, 0 + 0.001 + 0.0011 + 3600);
}

TEST(LatencyStatsTest, TheSummaryCarriesMeanP99AndHistogram) {
  LatencyStats s;
  for (int i = 1; i <= 100; ++i) s.record(std::chrono::microseconds(i * 10));
  const LatencySummary sum = s.summary();
  EXPECT_EQ(sum.count, 100);
  EXPECT_NEAR(sum.mean_us, 505, 1e-6);
  EXPECT_NEAR(sum.p99_us, 990, 1e-3);
  EXPECT_EQ(sum.histogram.count, 100);
  EXPECT_NEAR(sum.histogram.sum_seconds, 0.0505, 1e-9);
  EXPECT_EQ(sum.histogram.buckets[0], 10);  // 10..100 us <= 100 us
}

}  // namespace
}  // namespace kvtier::util
