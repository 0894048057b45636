// Prometheus's text exposition format (version 0.0.4), written one metric
// family at a time: its # HELP and # TYPE lines, then its samples, label
// values escaped (\\, \", \n) as the format says. Histograms are written
// from a LatencyHistogram: cumulative _bucket samples with "le" (the last
// "+Inf"), then _sum and _count.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/latency_stats.h"

namespace kvtier::wire::http {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: "counter", "gauge" or "histogram". A family's samples
  // follow it, all of them before the next family.
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, double value);
  void sample(std::string_view name, double value) { sample(name, {}, value); }
  void histogram(std::string_view name, const Labels& labels, const util::LatencyHistogram& h);

  const std::string& text() const { return out_; }

 private:
  void write_labels(const Labels& labels);

  std::string out_;
};

}  // namespace kvtier::wire::http
