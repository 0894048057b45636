#include "util/latency_stats.h"

#include <algorithm>
#include <vector>

namespace kvtier::util {

void LatencyHistogram::observe(double seconds) {
  const auto at = std::lower_bound(kBoundsSeconds.begin(), kBoundsSeconds.end(), seconds);
  ++buckets[static_cast<std::size_t>(at - kBoundsSeconds.begin())];
  ++count;
  sum_seconds += seconds;
}

void LatencyStats::record(std::chrono::nanoseconds d) {
  const double us = static_cast<double>(d.count()) / 1000.0;
  recent_us_[static_cast<std::size_t>(count_) % kWindow] = static_cast<float>(us);
  ++count_;
  total_us_ += us;
  histogram_.observe(us / 1e6);
}

LatencySummary LatencyStats::summary() const {
  LatencySummary s;
  s.count = count_;
  s.histogram = histogram_;
  if (count_ == 0) return s;
  s.mean_us = total_us_ / static_cast<double>(count_);
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(count_), kWindow);
  std::vector<float> sorted(recent_us_.begin(), recent_us_.begin() + static_cast<long>(n));
  // Nearest rank: the smallest sample with at least 99% of the samples at or below it.
  const std::size_t rank = (99 * n + 99) / 100 - 1;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(rank), sorted.end());
  s.p99_us = sorted[rank];
  return s;
}

}  // namespace kvtier::util
