// Runs scripts/plot_soak.sh with PLOT_FORMAT=svg on small CSVs written here
// and reads what gnuplot drew: the series in each plot's key and the tick
// labels of each axis. --compare overlays the three configurations' TTFT
// CDFs in one plot on a log axis; the titles carry the run's settings
// (PREFIX-config.csv); memory and throughput axes start at 0; the hit-rate
// plot has one series per tier the run had. Skipped where gnuplot is not
// installed (scripts/install-deps.sh installs gnuplot-nox).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

constexpr char kNoGnuplot[] =
    "gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox): "
    "scripts/plot_soak.sh cannot run";

bool have_gnuplot() { return test_util::on_path("gnuplot"); }

test_util::CommandResult plot(const std::string& args) {
  return test_util::run_command("PLOT_FORMAT=svg '" + std::string(KVTIER_SOURCE_DIR) +
                                "/scripts/plot_soak.sh' " + args + " 2>&1");
}

// What a gnuplot SVG shows. gnuplot anchors the left axis's tick labels at
// their end, the right axis's at their start and the bottom axis's in their
// middle; each series is a group `gnuplot_plot_N` whose first text is its
// title in the key.
struct Svg {
  std::vector<std::string> series;
  std::vector<double> x, y, y2;  // numeric tick labels by axis
  std::string text;              // every text, one a line: titles, labels, key
};

Svg read_svg(const fs::path& path) {
  std::ifstream in(path);
  const std::string s((std::istreambuf_iterator<char>(in)), {});
  Svg svg;
  const std::string anchor = "text-anchor=\"";
  for (std::size_t at = 0; (at = s.find("<text>", at)) != std::string::npos;) {
    const std::size_t end = s.find("</text>", at);
    std::string t = s.substr(at + 6, end - at - 6);
    at = end;
    svg.text += t + "\n";
    const std::size_t a = s.rfind(anchor, at);
    if (a == std::string::npos) continue;
    const std::string where =
        s.substr(a + anchor.size(), s.find('"', a + anchor.size()) - a - anchor.size());
    char* rest = nullptr;
    const double v = std::strtod(t.c_str(), &rest);
    if (rest == t.c_str() || *rest != '\0') continue;  // not a number: no tick label
    (where == "middle" ? svg.x : where == "end" ? svg.y : svg.y2).push_back(v);
  }
  for (std::size_t at = 0; (at = s.find("<g id=\"gnuplot_plot_", at)) != std::string::npos;) {
    const std::size_t open = s.find("<text>", at);
    at = s.find("</text>", open);
    svg.series.push_back(s.substr(open + 6, at - open - 6));
  }
  return svg;
}

double lowest(const std::vector<double>& ticks) {
  return ticks.empty() ? NAN : *std::min_element(ticks.begin(), ticks.end());
}

// PREFIX-requests.csv as bench/loadgen_report.cpp writes it, with only the
// columns the script reads (it finds them by name): 100 answered requests
// whose TTFTs spread evenly on a log scale from `fastest_ms` to
// `slowest_ms`, their hit tiers in turn.
void write_requests(const fs::path& prefix, double fastest_ms, double slowest_ms) {
  std::ofstream f(prefix.string() + "-requests.csv");
  f << "index,ttft_ms,hit_tier,finish_reason,error\n";
  const char* hits[] = {"miss", "l1", "l2", "l3"};
  for (int i = 0; i < 100; ++i)
    f << i << ',' << fastest_ms * std::pow(slowest_ms / fastest_ms, i / 99.0) << ',' << hits[i % 4]
      << ",length,\"\"\n";
}

// PREFIX-config.csv: the settings of a run on tiers of `tiers` blocks.
void write_config(const fs::path& prefix, const std::string& label,
                  const std::map<std::string, int>& tiers) {
  std::ofstream f(prefix.string() + "-config.csv");
  f << "key,value\nlabel," << label
    << "\nmodel,fortunes-char\nworkload,abc\napi,jsonrpc\nrate,6\nconcurrency,6\ndaemons,1\n"
       "duration_s,60\nseed,1\npreemption,swap\n";
  for (const auto& [tier, blocks] : tiers) f << tier << "_blocks," << blocks << '\n';
}

// PREFIX-stats.csv, one row a second for a minute: the tiers in `capacity`
// hold that many blocks (0: a tier with no capacity of its own, the remote
// one) and find blocks every second; the others read 0 throughout, as the
// daemon reports a tier it does not have. RSS stays near 500 MiB, the tree
// near 100 nodes, throughput near 50 tokens/s and 1.5 requests/s: far from
// 0, so that only an axis made to start there shows a 0.
void write_stats(const fs::path& prefix, const std::map<std::string, int>& capacity) {
  std::ofstream f(prefix.string() + "-stats.csv");
  f << "t_s,blocks_used,tokens_per_s,completed_per_s";
  const char* tiers[] = {"l1", "l2", "l3", "remote"};
  for (const char* t : tiers) f << ',' << t << "_used," << t << "_capacity," << t << "_hits";
  f << ",missed_blocks,cache_nodes,rss_kb\n";
  for (int s = 1; s <= 60; ++s) {
    f << s << ",10," << 50 + 5 * std::sin(s) << ',' << 1.5 + 0.3 * std::cos(s);
    for (int t = 0; t < 4; ++t) {
      const auto it = capacity.find(tiers[t]);
      if (it == capacity.end())
        f << ",0,0,0";
      else
        f << ',' << it->second << ',' << it->second << ',' << s * (t + 1) + s % 3;
    }
    f << ',' << 4 * s << ',' << 100 + s / 2 << ',' << 512000 + 2000 * std::sin(s) << '\n';
  }
}

const std::map<std::string, int> kThreeTiers = {{"l1", 24}, {"l2", 32}, {"l3", 96}};

TEST(PlotSoakTest, CompareOverlaysTheThreeConfigurationsOnOneLogAxis) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  test_util::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"l1", "L1 recompute"}, {"l1l2", "L1+L2"}, {"l1l2l3", "L1+L2+L3 swap"}};
  double fastest = 200;
  for (const auto& [tag, label] : runs) {
    write_requests(dir.path() / tag, fastest, 20 * fastest);
    write_config(dir.path() / tag, label, {{"l1", 24}});
    fastest /= 5;  // 8 ms to 4 s in all: three decades
  }
  const auto [status, output] = plot("--compare '" + dir.path().string() + "'");
  ASSERT_EQ(status, 0) << output;

  const Svg svg = read_svg(dir.path() / "compare-ttft.svg");
  ASSERT_EQ(svg.series.size(), runs.size()) << svg.text;
  for (std::size_t i = 0; i < runs.size(); ++i)
    EXPECT_EQ(svg.series[i].rfind(runs[i].second, 0), 0u) << svg.series[i];
  for (double decade : {10, 100, 1000})  // a linear axis over 8..4000 has ticks 0, 500, 1000, ...
    EXPECT_EQ(std::count(svg.x.begin(), svg.x.end(), decade), 1)
        << decade << " is no tick of the x axis:\n"
        << svg.text;
}

TEST(PlotSoakTest, TitlesCarryTheRunsSettings) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  test_util::TempDir dir;
  const fs::path prefix = dir.path() / "soak";
  write_requests(prefix, 10, 1000);
  write_stats(prefix, kThreeTiers);
  write_config(prefix, "L1+L2+L3 swap", kThreeTiers);
  const auto [status, output] = plot("'" + prefix.string() + "'");
  ASSERT_EQ(status, 0) << output;

  for (const char* name : {"occupancy", "hitrate", "ttft", "throughput", "memory"}) {
    const Svg svg = read_svg(prefix.string() + "-" + name + ".svg");
    for (const char* setting : {"L1+L2+L3 swap", "model fortunes-char", "workload abc at 6/s",
                                "60 s", "L1 24, L2 32, L3 96 blocks", "preemption swap"})
      EXPECT_TRUE(test_util::contains(svg.text, setting)) << name;
  }
}

TEST(PlotSoakTest, MemoryAndThroughputAxesStartAtZero) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  test_util::TempDir dir;
  const fs::path prefix = dir.path() / "soak";
  write_requests(prefix, 10, 1000);
  write_stats(prefix, kThreeTiers);
  const auto [status, output] = plot("'" + prefix.string() + "'");
  ASSERT_EQ(status, 0) << output;

  for (const char* name : {"memory", "throughput"}) {
    const Svg svg = read_svg(prefix.string() + "-" + name + ".svg");
    EXPECT_EQ(lowest(svg.y), 0) << name << ":\n" << svg.text;   // RSS MiB, tokens/s
    EXPECT_EQ(lowest(svg.y2), 0) << name << ":\n" << svg.text;  // tree nodes, requests/s
  }
}

TEST(PlotSoakTest, HitRatePlotHasOneSeriesPerTierOfTheRun) {
  if (!have_gnuplot()) GTEST_SKIP() << kNoGnuplot;
  const std::vector<std::pair<std::map<std::string, int>, std::vector<std::string>>> cases = {
      {kThreeTiers, {"L1", "L2", "L3"}},
      {{{"l1", 24}, {"remote", 0}}, {"L1", "remote"}},
  };
  for (const auto& [tiers, series] : cases) {
    test_util::TempDir dir;
    const fs::path prefix = dir.path() / "run";
    write_requests(prefix, 10, 1000);
    write_stats(prefix, tiers);
    const auto [status, output] = plot("'" + prefix.string() + "'");
    ASSERT_EQ(status, 0) << output;
    EXPECT_EQ(read_svg(prefix.string() + "-hitrate.svg").series, series);
  }
}

}  // namespace
}  // namespace kvtier
