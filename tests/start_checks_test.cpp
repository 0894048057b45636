// kvtierd's start and --check-config refuse the same configurations from
// the files alone, with the same message (but for figures that move
// between runs, such as the memory available) and exit code
// (daemon/start_checks.h): one list of cases, each run both ways. A
// --check-config that said "valid" and then a start that refused is what
// docs/service.md's advice to check before a restart cannot afford.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "daemon_test_util.h"

namespace kvtier::daemon_test {
namespace {

namespace fs = std::filesystem;

// The message of kvtierd's "error:" line ("" when there is none).
std::string error_line(const std::string& err) {
  const std::size_t at = err.find("error: ");
  if (at == std::string::npos) return "";
  return err.substr(at + 7, err.find('\n', at) - at - 7);
}

// A message with its figures taken out: the memory available moves
// between two runs ("but 22.1 GiB is available").
std::string shape(const std::string& message) {
  return std::regex_replace(message, std::regex("[0-9][0-9.]*"), "#");
}

TEST(StartChecksTest, CheckConfigRefusesWhatTheStartRefusesWithTheSameMessage) {
  test_util::TempDir dir;
  const fs::path short_key = dir.write("short-key", "abc");
  ::chmod(short_key.c_str(), 0600);
  const fs::path open_key = dir.write("open-key", std::string(40, 'k'));
  ::chmod(open_key.c_str(), 0644);
  const fs::path no_config = dir.path() / "model-without-config";
  fs::create_directories(no_config);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--http-listen", "0.0.0.0:8000"}, "reachable beyond this machine"},
      {{"--http-listen", "0.0.0.0:8000", "--http-api-key-file", (dir.path() / "no-key").string()},
       "No such file"},
      {{"--http-listen", "0.0.0.0:8000", "--http-api-key-file", short_key.string()},
       "a key of 3 bytes"},
      {{"--http-listen", "0.0.0.0:8000", "--http-api-key-file", open_key.string()},
       "readable by every user"},
      {{"--http-api-key-file", open_key.string()}, "http_listen is not"},
      {{"--l2-bytes", "1T"}, "of host memory"},
      {{"--device", "cpu", "--l1-bytes", "512G"}, "of host memory"},
      {{"--model", no_config.string()}, "config.json"},
      {{"--socket-group", "no-such-group-kvtier"}, "--socket-group"},
      // The bundled model is GPT-2's kind: learned positions.
      {{"--eviction", "h2o:start=16,recent=16,max=64,rotate=on"},
       "positions are learned, not rotary"},
  };
  const std::string socket = (dir.path() / "kvtierd.sock").string();
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--socket", socket};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::vector<std::string> check = args;
    check.push_back("--check-config");
    const RunResult checked = run_kvtierd(check);
    const RunResult started = run_kvtierd(args);
    const std::string what = testing::PrintToString(c.args);
    ASSERT_TRUE(checked.status && WIFEXITED(*checked.status)) << what;
    ASSERT_TRUE(started.status && WIFEXITED(*started.status)) << what;
    EXPECT_EQ(WEXITSTATUS(*checked.status), 78) << what << "\n" << checked.err;
    EXPECT_EQ(WEXITSTATUS(*started.status), 78) << what << "\n" << started.err;
    EXPECT_TRUE(test_util::contains(error_line(checked.err), c.says)) << what << checked.err;
    EXPECT_EQ(shape(error_line(checked.err)), shape(error_line(started.err))) << what;
  }
  // And a configuration both take: the bundled model's defaults.
  const RunResult valid = run_kvtierd({"--socket", socket, "--check-config"});
  ASSERT_TRUE(valid.status && WIFEXITED(*valid.status));
  EXPECT_EQ(WEXITSTATUS(*valid.status), 0) << valid.err;
}

}  // namespace
}  // namespace kvtier::daemon_test
