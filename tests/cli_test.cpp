#include "daemon/cli.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace kvtier::daemon {
namespace {

std::expected<CommandLine, wire::CliExit> parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "kvtierd");
  DaemonConfig defaults;
  defaults.model_dir = std::string(KVTIER_SOURCE_DIR) + "/models/fortunes-char";
  return cli_parse(flags, defaults);
}

TEST(CliTest, EveryNumberOutsideTheTableOfLimitsIsRefusedNamingItsFlag) {
  const std::vector<std::vector<std::string>> refused = {
      {"--max-kv-tokens", "100000000"},
      {"--max-kv-tokens", "-16"},
      {"--threads", "100000"},
      {"--page-size", "0"},
      {"--max-pending", "0"},
      {"--max-line-bytes", "63"},
      {"--max-line-bytes", "1023"},
      {"--max-connections", "0"},
      {"--max-output-bytes", "100"},
      {"--max-batch-size", "0"},
      {"--token-budget", "2000000"},
      {"--drain-timeout", "-1"},
      {"--l2-bytes", "2T"},
      {"--l1-bytes", "-1"},
  };
  for (const auto& flags : refused) {
    auto cl = parse(flags);
    ASSERT_FALSE(cl) << flags[0] << " " << flags[1] << " was accepted";
    EXPECT_NE(cl.error().code, 0);
    EXPECT_TRUE(test_util::contains(cl.error().err, flags[0])) << cl.error().err;
  }
  // Each limit's own end is accepted.
  auto edge = parse(
      {"--max-line-bytes", "1024", "--max-pending", "1", "--threads", "1024", "--l2-bytes", "1T"});
  ASSERT_TRUE(edge) << edge.error().err;
  EXPECT_EQ(edge->config.max_line_bytes, 1024u);
  EXPECT_EQ(edge->config.max_pending, 1);
}

TEST(CliTest, TheConfigFileIsCheckedAgainstTheSameLimits) {
  test_util::TempDir dir;
  const auto file = dir.write("kvtierd.toml", "max-line-bytes = 100\n");
  auto cl = parse({"--config", file.string()});
  ASSERT_FALSE(cl);
  EXPECT_TRUE(test_util::contains(cl.error().err, "max-line-bytes")) << cl.error().err;
}

// --check-config parses and validates like a start, and only that.
TEST(CliTest, CheckConfigValidatesTheSettingsAndStartsNothing) {
  test_util::TempDir dir;
  auto good = parse(
      {"--config", dir.write("good.toml", "max-batch-size = 4\n").string(), "--check-config"});
  ASSERT_TRUE(good) << good.error().err;
  EXPECT_TRUE(good->check_only);
  EXPECT_EQ(good->config.scheduler.max_batch_size, 4);
  auto bad =
      parse({"--config", dir.write("bad.toml", "max-batch-size = 0\n").string(), "--check-config"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, wire::kExitConfig);
  EXPECT_TRUE(test_util::contains(bad.error().err, "bad.toml:1")) << bad.error().err;
  EXPECT_FALSE(parse({})->check_only);
}

// One-shot generation runs on the CPU: asking it for the GPU is an error,
// not a CPU run that looks like a GPU one.
TEST(CliTest, OneShotRefusesTheGpuAndTakesTheCpu) {
  auto gpu = parse({"--prompt", "Q:", "--device", "cuda"});
  ASSERT_FALSE(gpu);
  EXPECT_EQ(gpu.error().code, wire::kExitConfig);
  EXPECT_TRUE(test_util::contains(gpu.error().err, "--device cuda: one-shot generation"));
  for (const char* device : {"cpu", "auto"}) {
    auto cpu = parse({"--prompt", "Q:", "--device", device});
    ASSERT_TRUE(cpu) << cpu.error().err;
    EXPECT_TRUE(cpu->oneshot.has_value());
  }
}

// A config file is read whole: /dev/zero or a FIFO once hung kvtierd
// (growing it without bound), and a binary file's bytes went to the
// terminal in the error message.
TEST(CliTest, AConfigFileMustBeASmallRegularFileAndItsErrorsArePrintable) {
  test_util::TempDir dir;
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = dir.write("big.toml", std::string((1 << 20) + 1, '#')).string();
  for (const std::string& path : {std::string("/dev/zero"), fifo, big, dir.path().string()}) {
    auto cl = parse({"--config", path});
    ASSERT_FALSE(cl) << path;
    EXPECT_TRUE(test_util::contains(cl.error().err, path)) << cl.error().err;
  }
  std::string binary = "\x01\x1b[2J\xff\xfe = 1\n";
  auto cl = parse({"--config", dir.write("binary.toml", binary).string()});
  ASSERT_FALSE(cl);
  EXPECT_TRUE(test_util::contains(cl.error().err, "not TOML")) << cl.error().err;
  for (char c : cl.error().err)
    EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << "unprintable byte " << int(c);
}

}  // namespace
}  // namespace kvtier::daemon
