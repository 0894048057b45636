// Runs a short soak (bench/soak.cpp) through the real kvtierd with tiny tiers
// and the bundled model: the soak's own checks (no request lost, RSS flat,
// block conservation, cached answers equal cold ones, clean exit) must pass
// and its CSVs must hold rows. The soak bounds its own run (--duration plus
// its drain timeout); nothing here is timed. scripts/plot_soak.sh must then
// draw its PNGs from those CSVs (tests/plot_soak_test.cpp checks what they
// show). A short fleet run (--fleet) must pass its checks too, with answers
// served from the remote tier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "redis_server.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// build/daemon/kvtierd -> build/bench/soak
fs::path soak_path() {
  return fs::path(KVTIER_DAEMON_PATH).parent_path().parent_path() / "bench" / "soak";
}

// Runs the soak with `args` (and --kvtierd, --model, --out) and waits.
test_util::CommandResult run_soak(const std::string& args, const fs::path& out) {
  return test_util::run_command("'" + soak_path().string() + "' --kvtierd '" + KVTIER_DAEMON_PATH +
                                "' --model '" + KVTIER_SOURCE_DIR + "/models/fortunes-char' " +
                                args + " --quiet --out '" + out.string() + "' 2>&1");
}

long count_lines(const fs::path& p) {
  std::ifstream in(p);
  long n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(SoakTest, ShortSoakWithTinyTiersPassesItsChecks) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  test_util::TempDir dir;
  const fs::path out = dir.path() / "soak";
  const auto [status, output] = run_soak(
      "--duration 20 --warmup 6 --rate 3 --concurrency 4 --verify 6 --l1-blocks 20 "
      "--l2-blocks 16 --l3-blocks 48 --threads 1",
      out);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  EXPECT_GT(count_lines(out / "soak-requests.csv"), 10) << output;  // header + requests
  EXPECT_GT(count_lines(out / "soak-stats.csv"), 10) << output;     // header + one a second
  // The settings the plots' titles carry, with the tier sizes the daemon reported.
  std::ifstream config(out / "soak-config.csv");
  const std::string settings((std::istreambuf_iterator<char>(config)), {});
  EXPECT_TRUE(test_util::contains(settings, "\nmodel,fortunes-char\n"));
  EXPECT_TRUE(test_util::contains(settings, "\nduration_s,20\n"));
  EXPECT_TRUE(test_util::contains(settings, "\nl2_blocks,16\n"));

  // The plot script reads these very CSVs (gnuplot is in install-deps.sh).
  if (!test_util::on_path("gnuplot")) {
    std::printf("note: gnuplot not found; scripts/plot_soak.sh not checked\n");
    return;
  }
  const std::string plot = "'" + std::string(KVTIER_SOURCE_DIR) + "/scripts/plot_soak.sh' '" +
                           (out / "soak").string() + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(plot.c_str()), 0) << plot;
  for (const char* png : {"occupancy", "hitrate", "ttft", "throughput", "memory"}) {
    const fs::path f = out / ("soak-" + std::string(png) + ".png");
    EXPECT_TRUE(fs::exists(f) && fs::file_size(f) > 1000) << f;
  }
}

// Two daemons, round-robin, as islands and then sharing a redis-server of the
// soak's own: its checks pass (among them: answers whose prefix came from
// the remote tier equal cold ones), and the shared run's CSV shows such
// answers.
TEST(SoakTest, ShortFleetRunSharesPrefixesThroughRedis) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  SKIP_WITHOUT_REDIS();
  test_util::TempDir dir;
  const fs::path out = dir.path() / "fleet";
  const auto [status, output] = run_soak(
      "--fleet 2 --duration 8 --rate 4 --concurrency 2 --verify 4 --l1-blocks 20 "
      "--l2-blocks 16 --l3-blocks 32 --threads 1 --redis-bytes 67108864",
      out);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  // Rows whose cached_remote is above 0 (the columns before it hold no comma).
  std::ifstream csv(out / "fleet-shared-requests.csv");
  std::string header;
  ASSERT_TRUE(std::getline(csv, header)) << output;
  const auto fields = [](const std::string& line) {
    std::vector<std::string> f;
    std::stringstream in(line);
    for (std::string field; std::getline(in, field, ',');) f.push_back(field);
    return f;
  };
  const std::vector<std::string> names = fields(header);
  const auto column = std::find(names.begin(), names.end(), "cached_remote") - names.begin();
  ASSERT_LT(column, static_cast<long>(names.size())) << header;
  long remote_hits = 0;
  for (std::string line; std::getline(csv, line);) {
    const std::vector<std::string> row = fields(line);
    if (column < static_cast<long>(row.size()) && std::atol(row[column].c_str()) > 0) ++remote_hits;
  }
  EXPECT_GT(remote_hits, 0) << output;
}

// --router: the same arrivals round-robin and through kvtier-router (here
// the router's first, --router-first); both runs pass their checks (none
// lost, cold answers identical through the router) and the router says how
// it chose.
TEST(SoakTest, ShortFleetRunThroughTheRouter) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  SKIP_WITHOUT_REDIS();
  test_util::TempDir dir;
  const fs::path out = dir.path() / "fleet";
  const auto [status, output] = run_soak(
      "--fleet 2 --router --router-first --workload b --duration 6 --rate 4 --concurrency 2 "
      "--verify 4 --l1-blocks 20 --l2-blocks 16 --l3-blocks 32 --threads 1 "
      "--redis-bytes 67108864",
      out);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  EXPECT_NE(output.find("through kvtier-router, then round-robin"), std::string::npos) << output;
  EXPECT_LT(output.find("router: PASS requests"), output.find("round-robin: PASS requests"))
      << output;
  EXPECT_NE(output.find("router choices {"), std::string::npos) << output;
  EXPECT_TRUE(fs::exists(out / "fleet-router-requests.csv")) << output;
  EXPECT_TRUE(fs::exists(out / "fleet-round-robin-requests.csv")) << output;
}

// --kill-at: a daemon SIGKILLed mid-run and started again; in the router's
// half alone nothing is lost, only requests already streaming may fail, the
// cold answers are identical and the router takes the daemon back. (How
// soon it sends it requests again, the soak's 2 s target, is a timing: the
// soak reports it, this test does not assert it.)
TEST(SoakTest, ShortFleetRunWithADaemonKilledAndBack) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  SKIP_WITHOUT_REDIS();
  test_util::TempDir dir;
  const fs::path out = dir.path() / "fleet";
  const auto [status, output] = run_soak(
      "--fleet 2 --router --kill-at 3 --kill-for 1 --workload b --duration 8 --rate 4 "
      "--concurrency 2 --verify 4 --l1-blocks 20 --l2-blocks 16 --l3-blocks 32 --threads 1 "
      "--redis-bytes 67108864",
      out);
  EXPECT_NE(status, 2) << output;  // it ran
  for (const char* passed : {"router: PASS requests", "router: PASS cold", "router: PASS exit"})
    EXPECT_NE(output.find(passed), std::string::npos) << passed << " in\n" << output;
  const std::size_t usable = output.find("usable again after ");
  ASSERT_NE(usable, std::string::npos) << output;
  EXPECT_GE(std::atof(output.c_str() + usable + 19), 0) << output;  // -1: never
  EXPECT_TRUE(fs::exists(out / "fleet-router-kill-requests.csv")) << output;
  EXPECT_FALSE(fs::exists(out / "fleet-round-robin-requests.csv")) << output;
}

// Tiers given in bytes (rounded down to the bundled model's 64 KiB blocks)
// and workload f's long documents: the checks pass, the daemon got those
// sizes, and the L3 slab is gone after the run.
TEST(SoakTest, TiersInBytesWithLongDocuments) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  test_util::TempDir dir;
  const fs::path out = dir.path() / "soak";
  const auto [status, output] = run_soak(
      "--duration 12 --warmup 5 --rate 3 --concurrency 3 --verify 4 --workload f "
      "--l1-bytes 1280K --l2-bytes 1M --l3-bytes 3200K --threads 1",
      out);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  EXPECT_NE(output.find("L1 20 blocks (1.2 MiB), L2 16 blocks (1.0 MiB), L3 50 blocks (3.1 MiB)"),
            std::string::npos)
      << output;
  std::ifstream config(out / "soak-config.csv");
  const std::string settings((std::istreambuf_iterator<char>(config)), {});
  EXPECT_TRUE(test_util::contains(settings, "\nworkload,f\n")) << settings;
  EXPECT_TRUE(test_util::contains(settings, "\nl3_blocks,50\n")) << settings;
  EXPECT_FALSE(fs::exists(out / "soak-l3")) << "the L3 slab outlived its run";
}

// --gpt2-124m writes its own model: naming another is a usage error, found
// before anything is written.
TEST(SoakTest, Gpt2ModelExcludesModel) {
  const fs::path soak = soak_path();
  if (!fs::exists(soak)) GTEST_SKIP() << soak << " is not built (KVTIER_BUILD_BENCH=OFF?)";
  test_util::TempDir dir;
  const auto [status, output] = run_soak("--gpt2-124m --duration 1", dir.path() / "out");
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("excludes"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(dir.path() / "out" / "gpt2-124m-random")) << output;
}

}  // namespace
}  // namespace kvtier
