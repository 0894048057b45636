// Transfer latencies of one kind of operation: a count, mean and histogram
// over the whole run, and a p99 over the most recent kWindow samples (recent
// enough to show a degrading disk, small enough to sort on demand).
//
// Not thread-safe: each recorder has one writer, and readers go through
// whatever lock protects that writer's state.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>

namespace kvtier::util {

// Durations counted by bucket, as a Prometheus histogram exports them: one
// fixed set of bounds for every latency the daemon reports (a tier's block
// transfer, a request's time to first token...), from 100 us to 60 s.
struct LatencyHistogram {
  static constexpr std::array<double, 18> kBoundsSeconds = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                            0.01, 0.025,  0.05, 0.1,  0.25,   0.5,
                                                            1,    2.5,    5,    10,   30,     60};
  // buckets[i]: samples <= kBoundsSeconds[i] and above the bound before;
  // the last: above every bound.
  std::array<long, kBoundsSeconds.size() + 1> buckets{};
  long count = 0;
  double sum_seconds = 0;

  void observe(double seconds);
};

struct LatencySummary {
  long count = 0;
  double mean_us = 0;
  double p99_us = 0;
  LatencyHistogram histogram;
};

class LatencyStats {
 public:
  static constexpr std::size_t kWindow = 1024;

  void record(std::chrono::nanoseconds d);
  LatencySummary summary() const;

 private:
  long count_ = 0;
  double total_us_ = 0;
  std::array<float, kWindow> recent_us_{};
  LatencyHistogram histogram_;
};

}  // namespace kvtier::util
