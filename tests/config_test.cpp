#include "daemon/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace kvtier::daemon {
namespace {

using nlohmann::json;

// What config.set makes of `changes`: the new value of `name`, or the error.
std::expected<json, std::string> set(const json& changes, const char* name) {
  auto next = config_with_changes(DaemonConfig{}, changes);
  if (!next) return std::unexpected(next.error());
  return config_to_json(*next)[name]["value"];
}

TEST(ConfigTest, ConfigSetKeepsEveryRuntimeIntegerInsideItsLimits) {
  struct Case {
    const char* name;
    long long min, max;
  };
  // The table's limits, each end and one past it, as positive and negative
  // JSON integers (nlohmann reads the non-negative ones as unsigned, which
  // once skipped the minimum).
  const Case cases[] = {
      {"max_pending", limits::kMaxPending.min, limits::kMaxPending.max},
      {"max_line_bytes", static_cast<long long>(limits::kMaxLineBytes.min),
       static_cast<long long>(limits::kMaxLineBytes.max)},
      // token_budget 0 (chosen at start) caps nothing
      {"max_batch_size", limits::kMaxBatchSize.min, limits::kMaxBatchSize.max},
      {"token_budget", 8, limits::kTokenBudget.max},  // max_batch_size 8 floors it (but 0)
      {"mixed_prefill_tokens", limits::kTokenBudget.min, limits::kTokenBudget.max},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(set({{c.name, c.min}}, c.name), json(c.min));
    EXPECT_EQ(set({{c.name, c.max}}, c.name), json(c.max));
    EXPECT_FALSE(set({{c.name, c.min - 1}}, c.name));
    EXPECT_FALSE(set({{c.name, c.max + 1}}, c.name));
    EXPECT_FALSE(set({{c.name, -1}}, c.name));
    EXPECT_FALSE(set({{c.name, std::uint64_t{1} << 63}}, c.name));
    EXPECT_FALSE(set({{c.name, 1.5}}, c.name));
  }
  EXPECT_EQ(set({{"token_budget", 0}}, "token_budget"), json(0)) << "0: chosen at start";
}

TEST(ConfigTest, TheRefusalsThatOnceGotThroughNameTheSettingAndItsRange) {
  auto zero = set({{"max_pending", 0}}, "max_pending");
  ASSERT_FALSE(zero);
  EXPECT_TRUE(
      test_util::contains(zero.error(), "'max_pending' must be an integer in [1, 1048576]"));
  auto short_lines = set({{"max_line_bytes", 63}}, "max_line_bytes");
  ASSERT_FALSE(short_lines);
  EXPECT_TRUE(test_util::contains(short_lines.error(), "max_line_bytes"));
  // A line short enough to lock out every later config.set is refused too.
  EXPECT_FALSE(set({{"max_line_bytes", 64}}, "max_line_bytes"));
  EXPECT_FALSE(set({{"drain_timeout", -0.5}}, "drain_timeout"));
  EXPECT_FALSE(set({{"drain_timeout", 1e300}}, "drain_timeout"));
  EXPECT_EQ(set({{"drain_timeout", 2.5}}, "drain_timeout"), json(2.5));
}

TEST(ConfigTest, AReloadedFileIsCheckedAsConfigSetChecksIt) {
  DaemonConfig loaded;
  loaded.max_pending = 0;  // as if a file had got past the command line's checks
  EXPECT_FALSE(config_with_runtime_of(DaemonConfig{}, loaded));
  loaded.max_pending = 7;
  auto next = config_with_runtime_of(DaemonConfig{}, loaded);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->max_pending, 7);
}

}  // namespace
}  // namespace kvtier::daemon
