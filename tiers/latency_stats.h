// Transfer latencies of one kind of operation: a count and mean over the
// whole run, and a p99 over the most recent kWindow samples (recent enough to
// show a degrading disk, small enough to sort on demand).
//
// Not thread-safe: each recorder has one writer, and readers go through
// whatever lock protects that writer's state.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>

namespace kvtier::tiers {

struct LatencySummary {
  long count = 0;
  double mean_us = 0;
  double p99_us = 0;
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
};

}  // namespace kvtier::tiers
