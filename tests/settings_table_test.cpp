// The settings table itself (daemon/settings_table.cpp) and what config.h
// generates from it: each row's shape, its default, its checks, and
// config.get's listing of the rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "daemon/config.h"
#include "test_util.h"

namespace kvtier::daemon {
namespace {

using nlohmann::json;

bool is_number(SettingType type) {
  return type == SettingType::kInt || type == SettingType::kBytes || type == SettingType::kSeconds;
}

std::expected<void, std::string> store(const Setting& s, const json& value) {
  DaemonConfig scratch;
  return setting_store(s, scratch, value);
}

TEST(SettingsTableTest, EveryRowIsNamedOnceAndComplete) {
  std::set<std::string> names;
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(names.insert(s.name).second) << "named twice";
    EXPECT_EQ(setting_find(s.name), &s);
    for (char c : std::string_view(s.name))
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << c;
    EXPECT_FALSE(std::string_view(s.description).empty());
    EXPECT_NE(s.get, nullptr);
    EXPECT_NE(s.set, nullptr);
  }
  EXPECT_EQ(setting_find("no_such_setting"), nullptr);
  EXPECT_EQ(setting_flag(*setting_find("max_batch_size")), "--max-batch-size");
}

TEST(SettingsTableTest, NumbersHaveARangeChoicesHaveChoicesAndNothingElseHasEither) {
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    if (is_number(s.type)) {
      EXPECT_LE(s.range.min, s.range.max);
      EXPECT_GT(s.range.max, 0);
    } else {
      EXPECT_EQ(s.range.min, 0);
      EXPECT_EQ(s.range.max, 0);
    }
    EXPECT_EQ(s.type == SettingType::kChoice, !s.choices.empty());
  }
  const Setting& pending = *setting_find("max_pending");
  EXPECT_EQ(pending.range.min, limits::kMaxPending.min);
  EXPECT_EQ(pending.range.max, limits::kMaxPending.max);
}

// A row's default is DaemonConfig{}'s value: one its own checks accept, and
// that reads back the same once stored.
TEST(SettingsTableTest, EveryDefaultIsAcceptedByItsRowAndReadsBackTheSame) {
  const DaemonConfig defaults;
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    DaemonConfig c;
    ASSERT_TRUE(setting_store(s, c, s.get(defaults)));
    EXPECT_EQ(s.get(c), s.get(defaults));
  }
}

TEST(SettingsTableTest, EveryChoiceIsOneItsRowParses) {
  for (const Setting& s : settings()) {
    for (std::string_view choice : s.choices) {
      SCOPED_TRACE(std::string(s.name) + " " + std::string(choice));
      DaemonConfig c;
      ASSERT_TRUE(setting_store(s, c, std::string(choice)));
      EXPECT_EQ(s.get(c), std::string(choice));
    }
    if (s.type != SettingType::kChoice) continue;
    auto refused = store(s, "sometimes");
    ASSERT_FALSE(refused) << s.name;
    EXPECT_TRUE(test_util::contains(refused.error(), "must be one of \"")) << refused.error();
    EXPECT_FALSE(store(s, 1)) << s.name;
  }
}

TEST(SettingsTableTest, NumbersAreCheckedAgainstTheirRangeWhateverTheirJsonType) {
  for (const Setting& s : settings()) {
    if (!is_number(s.type)) continue;
    SCOPED_TRACE(s.name);
    const auto min = static_cast<std::int64_t>(s.range.min);
    const auto max = static_cast<std::int64_t>(s.range.max);
    // An end with a fraction (remote_timeout's millisecond) is checked as the
    // double it is.
    const json low_end = min == s.range.min ? json(min) : json(s.range.min);
    const json below = min == s.range.min ? json(min - 1) : json(s.range.min / 2);
    EXPECT_TRUE(store(s, low_end));
    EXPECT_TRUE(store(s, max));
    EXPECT_TRUE(store(s, static_cast<std::uint64_t>(max)));
    auto low = store(s, below);
    ASSERT_FALSE(low);
    EXPECT_EQ(low.error(), "must be " + setting_accepts(s) + ", got " + below.dump());
    EXPECT_FALSE(store(s, max + 1));
    EXPECT_FALSE(store(s, std::uint64_t{1} << 63));
    EXPECT_FALSE(store(s, -1e300));
    EXPECT_FALSE(store(s, std::to_string(max)));  // a string, not a number
    EXPECT_FALSE(store(s, true));
    if (s.type == SettingType::kSeconds) {
      EXPECT_TRUE(store(s, (s.range.min + s.range.max) / 2 + 0.5));
    } else {
      EXPECT_FALSE(store(s, static_cast<double>(min) + 0.5));
    }
  }
}

TEST(SettingsTableTest, RuntimeRowsAreExactlyTheOnesConfigSetChanges) {
  std::set<std::string> runtime;
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    if (s.runtime) runtime.insert(s.name);
    auto next = config_with_changes(DaemonConfig{}, {{s.name, s.get(DaemonConfig{})}});
    EXPECT_EQ(next.has_value(), s.runtime);
    if (!next) {
      EXPECT_TRUE(test_util::contains(next.error(), "restart it with " + setting_flag(s)))
          << next.error();
    }
  }
  // The ones config.h and docs/protocol.md name.
  EXPECT_EQ(runtime, (std::set<std::string>{"log_level", "max_pending", "max_line_bytes",
                                            "drain_timeout", "http_timeout", "token_budget",
                                            "mixed_prefill_tokens", "max_batch_size", "policy"}));
}

TEST(SettingsTableTest, ConfigGetListsEveryRowWithItsDescriptionDefaultAndRange) {
  DaemonConfig config;
  config.model_dir = "/models/m";
  config.max_pending = 7;
  const json got = config_to_json(config);
  ASSERT_EQ(got.size(), settings().size());
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(got.contains(s.name));
    const json& entry = got[s.name];
    EXPECT_EQ(entry["value"], s.get(config));
    EXPECT_EQ(entry["runtime"], s.runtime);
    EXPECT_EQ(entry["description"], s.description);
    EXPECT_EQ(entry.contains("default"), !s.default_found_at_start);
    if (entry.contains("default")) {
      EXPECT_EQ(entry["default"], s.get(DaemonConfig{}));
    }
    EXPECT_EQ(entry.contains("range"), is_number(s.type));
    if (entry.contains("range")) {
      EXPECT_EQ(entry["range"][0].get<double>(), s.range.min);
      EXPECT_EQ(entry["range"][1].get<double>(), s.range.max);
    }
    EXPECT_EQ(entry.contains("choices"), s.type == SettingType::kChoice);
    if (entry.contains("choices")) {
      EXPECT_EQ(entry["choices"].size(), s.choices.size());
    }
  }
  EXPECT_EQ(got["max_pending"]["value"], 7);
  EXPECT_EQ(got["max_pending"]["default"], 256);
  EXPECT_EQ(got["max_pending"]["range"], json::array({1, 1 << 20}));
  EXPECT_EQ(got["policy"]["choices"], json::array({"fcfs", "priority"}));
  EXPECT_EQ(got["model"]["value"], "/models/m");
  EXPECT_FALSE(got["model"].contains("default"));
}

TEST(SettingsTableTest, ConfigDiffNamesWhatChangedInTableOrder) {
  DaemonConfig a, b;
  b.drain_timeout = 3;
  b.scheduler.page_size = 32;
  const auto changes = config_diff(a, b);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(std::string(changes[0].setting->name), "page_size");
  EXPECT_EQ(changes[0].from, 16);
  EXPECT_EQ(changes[0].to, 32);
  EXPECT_EQ(std::string(changes[1].setting->name), "drain_timeout");
}

}  // namespace
}  // namespace kvtier::daemon
