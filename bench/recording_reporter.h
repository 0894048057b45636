// A console reporter that also keeps every run's counters by name, so a
// benchmark program can print ratios between runs after they finish.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

namespace kvtier::bench {

class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      auto& r = results_[run.benchmark_name()];
      r["seconds"] = run.GetAdjustedRealTime() * seconds_per_unit(run.time_unit);
      for (const auto& [key, counter] : run.counters) r[key] = counter.value;
    }
  }

  // The counter (or "seconds" per iteration) of a run; 0 if it did not run.
  double get(const std::string& run, const std::string& key) const {
    auto it = results_.find(run);
    if (it == results_.end()) return 0.0;
    auto jt = it->second.find(key);
    return jt == it->second.end() ? 0.0 : jt->second;
  }

 private:
  static double seconds_per_unit(benchmark::TimeUnit unit) {
    switch (unit) {
      case benchmark::kNanosecond:
        return 1e-9;
      case benchmark::kMicrosecond:
        return 1e-6;
      case benchmark::kMillisecond:
        return 1e-3;
      case benchmark::kSecond:
        return 1.0;
    }
    return 1.0;
  }
  std::map<std::string, std::map<std::string, double>> results_;
};

}  // namespace kvtier::bench
