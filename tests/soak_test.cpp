// Runs a short soak (bench/soak.cpp) through the real kvtierd with tiny tiers
// and the bundled model: the soak's own checks (no request lost, RSS flat,
// block conservation, cached answers equal cold ones, clean exit) must pass
// and its CSVs must hold rows. The soak bounds its own run (--duration plus
// its drain timeout); nothing here is timed. scripts/plot_soak.sh must then
// draw its PNGs from those CSVs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// build/daemon/kvtierd -> build/bench/soak
fs::path soak_path() {
  return fs::path(KVTIER_DAEMON_PATH).parent_path().parent_path() / "bench" / "soak";
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
  const std::string cmd = "'" + soak.string() + "' --kvtierd '" + KVTIER_DAEMON_PATH +
                          "' --model '" + KVTIER_SOURCE_DIR + "/models/fortunes-char'" +
                          " --duration 20 --warmup 6 --rate 3 --concurrency 4 --verify 6" +
                          " --l1-blocks 20 --l2-blocks 16 --l3-blocks 48 --threads 1 --quiet" +
                          " --out '" + out.string() + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  EXPECT_GT(count_lines(out / "soak-requests.csv"), 10) << output;  // header + requests
  EXPECT_GT(count_lines(out / "soak-stats.csv"), 10) << output;     // header + one a second

  // The plot script reads these very CSVs (gnuplot is in install-deps.sh).
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("note: gnuplot not found; scripts/plot_soak.sh not checked\n");
    return;
  }
  const std::string plot = "'" + std::string(KVTIER_SOURCE_DIR) + "/scripts/plot_soak.sh' '" +
                           (out / "soak").string() + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(plot.c_str()), 0) << plot;
  for (const char* png : {"occupancy", "ttft", "throughput", "memory"}) {
    const fs::path f = out / ("soak-" + std::string(png) + ".png");
    EXPECT_TRUE(fs::exists(f) && fs::file_size(f) > 1000) << f;
  }
}

}  // namespace
}  // namespace kvtier
