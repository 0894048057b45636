// kvtier-router's command line, black-box: the exit codes are kvtierd's
// (wire/cli_exit.h), each failure a message on stderr, never CLI11's own codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "daemon_test_util.h"

namespace kvtier::daemon_test {
namespace {

struct Case {
  std::vector<std::string> args;
  int exit_code;
  std::string says;  // in stderr (stdout for --help)
};

TEST(RouterMainTest, ExitCodesAreKvtierdsWithAMessage) {
  test_util::TempDir dir;
  const std::string daemon = (dir.path() / "d.sock").string();
  const std::string socket = (dir.path() / "router.sock").string();
  const auto not_a_dir = test_util::write_file(dir.path() / "not-a-dir", "x");
  const std::vector<Case> cases = {
      {{"--help"}, 0, "--drain-timeout"},
      {{}, 2, "--daemon is required"},
      {{"--daemon", daemon, "--no-such-flag"}, 2, "--no-such-flag"},
      {{"--socket", socket, "--daemon"}, 2, "--daemon"},
      {{"--daemon", daemon, "two.sock"}, 2, "two.sock"},  // one address a --daemon
      {{"--daemon", daemon, "--max-connections", "0"}, 78, "--max-connections"},
      {{"--daemon", daemon, "--drain-timeout", "-1"}, 78, "--drain-timeout"},
      {{"--daemon", daemon, "--http-timeout", "soon"}, 78, "--http-timeout"},
      {{"--daemon", daemon, "--log-level", "loud"}, 78, "--log-level"},
      {{"--daemon", daemon, "--model", (dir.path() / "no-model").string()}, 78, "--model"},
      {{"--daemon", "tcp://nowhere"}, 78, "tcp://nowhere"},
      {{"--daemon", daemon, "--daemon-api-key-file", (dir.path() / "no-key").string()},
       78,
       "--daemon-api-key-file"},
      {{"--daemon", daemon, "--socket", (not_a_dir / "r.sock").string()}, 78, "not-a-dir"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {KVTIER_ROUTER_PATH};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (std::find(c.args.begin(), c.args.end(), "--socket") == c.args.end())
      args.insert(args.end(), {"--socket", socket});  // where a router that starts by mistake
                                                      // would listen
    const ProcessResult r = run_process(args, dir.path());
    const std::string shown = c.exit_code == 0 ? r.out : r.err;
    EXPECT_EQ(r.exit_code, c.exit_code) << testing::PrintToString(c.args) << "\n" << r.err;
    EXPECT_TRUE(test_util::contains(shown, c.says)) << testing::PrintToString(c.args);
  }
}

// Every flag `--help` lists is in docs/fleet.md, where the router's
// limits, signals and exit codes are.
TEST(RouterMainTest, EveryFlagIsInTheFleetPage) {
  test_util::TempDir dir;
  const ProcessResult help = run_process({KVTIER_ROUTER_PATH, "--help"}, dir.path());
  ASSERT_EQ(help.exit_code, 0);
  const std::string page =
      test_util::read_file(std::filesystem::path(KVTIER_SOURCE_DIR) / "docs/fleet.md");
  ASSERT_FALSE(page.empty());
  int flags = 0;
  for (std::size_t at = 0; (at = help.out.find("  --", at)) != std::string::npos;) {
    const std::size_t end = help.out.find_first_of(" =\n", at + 2);
    const std::string flag = help.out.substr(at + 2, end - at - 2);
    at = end;
    if (flag == "--help" || flag == "--version") continue;
    ++flags;
    EXPECT_TRUE(test_util::contains(page, "`" + flag)) << flag << " is not in docs/fleet.md";
  }
  EXPECT_GE(flags, 12);
}

}  // namespace
}  // namespace kvtier::daemon_test
