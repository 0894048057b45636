// kvtierd's command line (CLI11) and config file (TOML, config_file.h):
// every setting of the settings table (config.h) as a flag
// (setting_flags.h) and as a key of the --config file, plus the one-shot
// flags (oneshot.h), --help and --version. `kvtierd --help` is the
// reference.
//
// Config-file keys are the long flag names without the dashes in front
// (`max-kv-tokens = 8192`, or `max_kv_tokens`); flags on the command line
// override the file. Unknown keys and bad values are errors, as they are
// for flags.
//
// The daemon parses its arguments at start-up and, on SIGHUP, parses the same
// arguments again: a reload sees what a restart would see, the file as it is
// now with the command line still winning.
//
// Thread-safety: cli_parse is reentrant (each call builds its own CLI::App).
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/oneshot.h"
#include "wire/cli_exit.h"

namespace kvtier::daemon {

struct CommandLine {
  DaemonConfig config;
  std::optional<OneShotOptions> oneshot;  // set when --prompt asks for one generation
  std::string config_file;                // --config; empty when none was given
  // --check-config: the settings parse and validate; nothing starts. What
  // the machine allows (sockets, files, devices) is checked at start.
  bool check_only = false;
};

// Parses `args` (args[0] is the program name). `defaults` supplies what the
// flags do not set (the default model folder and socket path, found at run
// time by main).
std::expected<CommandLine, wire::CliExit> cli_parse(const std::vector<std::string>& args,
                                                    const DaemonConfig& defaults);

}  // namespace kvtier::daemon
