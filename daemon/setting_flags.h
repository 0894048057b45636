// The settings table (config.h) as kvtierd's flags: one CLI11 option per
// row, named after it (--max-batch-size for max_batch_size). A bool row is
// a flag and its negation (--prefix-cache, --no-prefix-cache). The config
// file is config_file.h's.
//
// Each option shows, in `kvtierd --help`, the row's description (marked
// "(runtime)" when config.set and SIGHUP may change it), its type with the
// range or choices, and its default. A value given is checked while CLI11
// parses, by setting_store() as config.set checks it, so the command line,
// the config file and config.set accept the same values, and a refusal
// names the flag. Sizes also take a suffix in powers of 1024 (256M, 4GiB).
//
// Thread-safety: none; one SettingFlags per CLI::App, used by one thread.
#pragma once

#include <CLI/CLI.hpp>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.h"

namespace kvtier::daemon {

// A value as text (a flag's, or a config file's string) as the JSON
// setting_store() checks: a size's suffix turned into bytes ("256M"), a
// number as a number, anything else as the string, which a numeric row then
// refuses. The error: a size that does not read.
std::expected<nlohmann::json, std::string> setting_value_from_text(const Setting& s,
                                                                   std::string text);

class SettingFlags {
 public:
  // Adds every row's option to `app`: general ones to `app` itself, the
  // others to the option groups "server" and "tiers", created here. --help
  // shows `defaults`' values as the defaults.
  SettingFlags(CLI::App& app, const DaemonConfig& defaults);
  // The options hold pointers into this object.
  SettingFlags(const SettingFlags&) = delete;
  SettingFlags& operator=(const SettingFlags&) = delete;

  // After app.parse(): stores in `config` every setting given on the command
  // line. Checked as they were parsed, so an error here (naming the flag)
  // means the table disagrees with itself.
  std::expected<void, std::string> apply(DaemonConfig& config) const;

  // Whether the setting `name` ("l2_bytes") was given on the command line.
  bool given(std::string_view name) const;

 private:
  struct Flag {
    const Setting* setting = nullptr;
    CLI::Option* option = nullptr;
    std::string text;  // as given; a size already in bytes
    bool on = false;   // bool rows
  };
  std::vector<Flag> flags_;  // one per row, sized once: CLI11 binds text and on
};

}  // namespace kvtier::daemon
