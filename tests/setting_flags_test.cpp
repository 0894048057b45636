// kvtierd's flags as the settings table makes them (daemon/setting_flags.cpp):
// a flag per row and a row per flag, the defaults --help shows, the runtime
// marks, and the same checks as config.set's, on the command line and in the
// config file.
#include "daemon/setting_flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/cli.h"
#include "test_util.h"

namespace kvtier::daemon {
namespace {

using nlohmann::json;

bool is_number(SettingType type) {
  return type == SettingType::kInt || type == SettingType::kBytes || type == SettingType::kSeconds;
}

// The options of `app` and of its option groups.
std::vector<const CLI::Option*> all_options(CLI::App& app) {
  std::vector<const CLI::Option*> out;
  for (const CLI::Option* o : std::as_const(app).get_options()) out.push_back(o);
  for (CLI::App* group : app.get_subcommands({})) {
    for (const CLI::Option* o : std::as_const(*group).get_options()) out.push_back(o);
  }
  return out;
}

std::expected<CommandLine, wire::CliExit> parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "kvtierd");
  return cli_parse(flags, DaemonConfig{});
}

TEST(SettingFlagsTest, EveryRowHasAFlagAndEveryFlagARow) {
  CLI::App app;
  SettingFlags flags(app, DaemonConfig{});
  std::set<std::string> from_rows, from_options;
  for (const Setting& s : settings()) from_rows.insert(setting_flag(s));
  for (const CLI::Option* o : all_options(app)) {
    if (o->get_name() != "--help") from_options.insert(o->get_name());
  }
  EXPECT_EQ(from_options, from_rows);
  for (const Setting& s : settings()) {
    if (s.type != SettingType::kBool) continue;
    const std::string no = "--no-" + setting_flag(s).substr(2);
    EXPECT_NE(app.get_option_no_throw(no), nullptr) << no;
  }
}

// --help as kvtierd prints it: outside the one-shot group (a request's
// flags, not settings), every flag is a row's, --config, --version or --help.
TEST(SettingFlagsTest, HelpListsEveryRowsFlagAndOnlyThemBesideTheOneShotOnes) {
  auto help = parse({"--help"});
  ASSERT_FALSE(help);
  ASSERT_EQ(help.error().code, 0);
  std::set<std::string> listed;
  std::istringstream lines(help.error().out);
  bool oneshot = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("[Option Group:")) oneshot = line == "[Option Group: one-shot]";
    const auto start = line.find_first_not_of(' ');
    if (oneshot || start == std::string::npos || !line.substr(start).starts_with("--")) continue;
    std::string names = line.substr(start, line.find(' ', start) - start);
    names = names.substr(0, names.find('{'));  // a flag's "{false}"
    std::istringstream each(names);
    for (std::string name; std::getline(each, name, ',');) listed.insert(name);
  }
  std::set<std::string> expected = {"--config", "--check-config", "--version"};
  for (const Setting& s : settings()) {
    expected.insert(setting_flag(s));
    if (s.type == SettingType::kBool) expected.insert("--no-" + setting_flag(s).substr(2));
  }
  EXPECT_EQ(listed, expected) << help.error().out;
  EXPECT_TRUE(test_util::contains(help.error().out, "[Option Group: server]"));
  EXPECT_TRUE(test_util::contains(help.error().out, "[Option Group: tiers]"));
}

// The default --help shows for a flag, given back as that flag, is
// DaemonConfig{}'s value.
TEST(SettingFlagsTest, EachDefaultInHelpGivesDaemonConfigsValue) {
  const DaemonConfig defaults;
  CLI::App shown_app;
  SettingFlags shown_flags(shown_app, defaults);
  for (const Setting& s : settings()) {
    SCOPED_TRACE(s.name);
    const std::string shown = shown_app.get_option(setting_flag(s))->get_default_str();
    const json value = s.get(defaults);
    if (s.type == SettingType::kBool) {
      EXPECT_EQ(shown, value.dump());
      continue;
    }
    if (value == "") {
      EXPECT_EQ(shown, "");
      continue;
    }
    CLI::App app;
    SettingFlags flags(app, defaults);
    const std::vector<std::string> args = {"kvtierd", setting_flag(s), shown};
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    ASSERT_NO_THROW(app.parse(static_cast<int>(argv.size()), argv.data()));
    ASSERT_TRUE(flags.given(s.name));
    DaemonConfig c;
    ASSERT_TRUE(flags.apply(c));
    EXPECT_EQ(s.get(c), value) << "--help shows " << shown;
  }
  // Sizes as a person would write them.
  EXPECT_EQ(shown_app.get_option("--l2-bytes")->get_default_str(), "256MiB");
  EXPECT_EQ(shown_app.get_option("--max-kv-tokens")->get_default_str(), "4096");
}

TEST(SettingFlagsTest, RuntimeMarksAreExactlyTheRuntimeRows) {
  CLI::App app;
  SettingFlags flags(app, DaemonConfig{});
  for (const CLI::Option* o : all_options(app)) {
    const bool marked = o->get_description().ends_with(" (runtime)");
    std::string name = o->get_name().substr(2);  // "--token-budget"
    std::ranges::replace(name, '-', '_');
    const Setting* s = setting_find(name);
    if (!s) {
      EXPECT_FALSE(marked) << o->get_name();
      continue;
    }
    EXPECT_EQ(marked, s->runtime) << o->get_name();
  }
}

// For every number: the ends of its range, one past each, a fraction and a
// word. The command line takes exactly what setting_store takes, and for
// runtime settings exactly what config.set takes; a refusal names the flag.
TEST(SettingFlagsTest, TheCommandLineAndConfigSetAcceptTheSameNumbers) {
  // Room for every range's ends: one-token pages, a batch of one, the
  // largest budget.
  const std::map<std::string, std::string> room = {
      {"page_size", "1"}, {"max_batch_size", "1"}, {"token_budget", "1048576"}};
  DaemonConfig base;
  base.scheduler.page_size = 1;
  base.scheduler.max_batch_size = 1;
  base.scheduler.token_budget = 1 << 20;
  for (const Setting& s : settings()) {
    if (!is_number(s.type)) continue;
    const auto min = static_cast<std::int64_t>(s.range.min);
    const auto max = static_cast<std::int64_t>(s.range.max);
    for (const json& value : {json(min - 1), json(min), json(max), json(max + 1),
                              json(static_cast<double>(min) + 0.5), json("many")}) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      SCOPED_TRACE(std::string(s.name) + " " + text);
      std::vector<std::string> args = {setting_flag(s), text};
      for (const auto& [name, v] : room) {
        if (name != s.name) args.insert(args.end(), {setting_flag(*setting_find(name)), v});
      }
      auto cl = parse(args);
      DaemonConfig scratch;
      EXPECT_EQ(cl.has_value(), setting_store(s, scratch, value).has_value());
      if (cl) {
        EXPECT_EQ(s.get(cl->config), value);
      } else {
        EXPECT_TRUE(test_util::contains(cl.error().err, setting_flag(s))) << cl.error().err;
      }
      if (s.runtime) {
        EXPECT_EQ(cl.has_value(), config_with_changes(base, {{s.name, value}}).has_value());
      }
    }
  }
}

TEST(SettingFlagsTest, SizesTakeASuffixOnTheCommandLineAndInTheFile) {
  test_util::TempDir dir;
  const auto file = dir.write("kvtierd.toml", "l3-bytes = \"1G\"\nmax-output-bytes = \"64KiB\"\n");
  auto cl = parse({"--l2-bytes", "16M", "--max-line-bytes", "2KiB", "--config", file.string()});
  ASSERT_TRUE(cl) << cl.error().err;
  EXPECT_EQ(cl->config.scheduler.cache.l2_bytes, std::size_t{16} << 20);
  EXPECT_EQ(cl->config.max_line_bytes, 2048u);
  EXPECT_EQ(cl->config.scheduler.cache.l3_bytes, std::size_t{1} << 30);
  EXPECT_EQ(cl->config.max_output_bytes, std::size_t{64} << 10);
  auto kib = parse({"--max-line-bytes", "1K"});  // the least it takes
  ASSERT_TRUE(kib) << kib.error().err;
  EXPECT_EQ(kib->config.max_line_bytes, 1024u);
  EXPECT_FALSE(parse({"--max-line-bytes", "1023"}));
  EXPECT_FALSE(parse({"--l2-bytes", "2T"}));
}

TEST(SettingFlagsTest, BoolSettingsAreAFlagAndItsNegationAndFileKeys) {
  auto off = parse({"--no-prefix-cache", "--no-load-by-layer", "--allow-any-uid"});
  ASSERT_TRUE(off) << off.error().err;
  EXPECT_FALSE(off->config.scheduler.prefix_cache);
  EXPECT_FALSE(off->config.scheduler.cache.load_by_layer);
  EXPECT_TRUE(off->config.allow_any_uid);
  // Without the cache, preemption recomputes and there is no L2.
  EXPECT_EQ(off->config.scheduler.preemption, PreemptionMode::kRecompute);
  EXPECT_EQ(off->config.scheduler.cache.l2_bytes, 0u);

  test_util::TempDir dir;
  const auto file = dir.write("kvtierd.toml", "load-by-layer = false\nallow-any-uid = true\n");
  auto from_file = parse({"--config", file.string()});
  ASSERT_TRUE(from_file) << from_file.error().err;
  EXPECT_FALSE(from_file->config.scheduler.cache.load_by_layer);
  EXPECT_TRUE(from_file->config.allow_any_uid);
  EXPECT_TRUE(from_file->config.scheduler.prefix_cache);
}

// The sample config file's commented-out keys state the defaults: given as
// they are written, they change nothing. Its model and socket-group lines
// are examples, not defaults.
TEST(SettingFlagsTest, TheSampleConfigFileStatesTheDefaults) {
  std::ifstream sample(std::string(KVTIER_SOURCE_DIR) + "/daemon/systemd/kvtierd.toml");
  ASSERT_TRUE(sample);
  std::string uncommented;
  std::set<std::string> keys;
  for (std::string line; std::getline(sample, line);) {
    const auto equals = line.find(" = ");
    if (!line.starts_with("# ") || equals == std::string::npos) continue;
    const std::string key = line.substr(2, equals - 2);
    if (key == "model" || key == "socket-group" || key.find(' ') != std::string::npos) continue;
    uncommented += line.substr(2, line.find(" #", equals) - 2) + "\n";
    keys.insert(key);
  }
  ASSERT_GE(keys.size(), 20u) << uncommented;
  test_util::TempDir dir;
  auto cl = parse({"--config", dir.write("defaults.toml", uncommented).string()});
  ASSERT_TRUE(cl) << cl.error().err;
  const json got = config_to_json(cl->config);
  for (const std::string& key : keys) {
    std::string name = key;
    std::ranges::replace(name, '-', '_');
    ASSERT_TRUE(got.contains(name)) << key;
    EXPECT_EQ(got[name]["value"], got[name]["default"]) << key;
  }
}

}  // namespace
}  // namespace kvtier::daemon
