// The Prometheus text writer (wire/http/prometheus_text.h): families,
// escaped label values, and histograms with cumulative buckets ending in
// +Inf, then _sum and _count.
#include "wire/http/prometheus_text.h"

#include <gtest/gtest.h>

namespace kvtier::wire::http {
namespace {

TEST(PrometheusTextTest, FamiliesSamplesAndEscapedLabels) {
  PrometheusText m;
  m.family("kvtier_x_total", "counter", "Things\ncounted");
  m.sample("kvtier_x_total", {{"a", "q\"uo\\te\nd"}, {"b", "2"}}, 3);
  m.sample("kvtier_x_total", 0.5);
  EXPECT_EQ(m.text(),
            "# HELP kvtier_x_total Things\\ncounted\n"
            "# TYPE kvtier_x_total counter\n"
            "kvtier_x_total{a=\"q\\\"uo\\\\te\\nd\",b=\"2\"} 3\n"
            "kvtier_x_total 0.5\n");
}

TEST(PrometheusTextTest, AHistogramsBucketsAreCumulative) {
  util::LatencyHistogram h;
  h.observe(0.00005);
  h.observe(0.00005);
  h.observe(0.3);
  PrometheusText m;
  m.histogram("kvtier_t_seconds", {{"tier", "l2"}}, h);
  const std::string& t = m.text();
  EXPECT_NE(t.find("kvtier_t_seconds_bucket{tier=\"l2\",le=\"0.0001\"} 2\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("kvtier_t_seconds_bucket{tier=\"l2\",le=\"0.25\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("kvtier_t_seconds_bucket{tier=\"l2\",le=\"0.5\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("kvtier_t_seconds_bucket{tier=\"l2\",le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("kvtier_t_seconds_count{tier=\"l2\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("kvtier_t_seconds_sum{tier=\"l2\"} 0.3001\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace kvtier::wire::http
