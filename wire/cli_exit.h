// How kvtierd and kvtier-router end on a command line they will not run:
// the exit codes they share and what a CLI11 parse error tells the user.
#pragma once

#include <string>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace kvtier::wire {

// Why parsing a command line stopped without a result (kvtierd's
// daemon/cli.h, kvtier-router's main): --help (code 0) or an error.
// kvtierd's exit codes beside 0 and 1 (failed while starting or running):
// a command line it cannot read, and a configuration it cannot run with
// (sysexits.h's EX_CONFIG), whether from a flag, the config file or what
// the machine has (systemd's unit does not restart it on the latter).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitConfig = 78;

struct CliExit {
  int code = 0;
  std::string out;  // for stdout (the help text)
  // kExitConfig: the refusal, one line, which main logs as it logs every
  // start-up refusal ("kvtierd: error: ..."); kExitUsage: CLI11's text for
  // stderr as it is, ending with the --help to read.
  std::string err;
};

// What a CLI11 parse error tells the user, for kvtierd and kvtier-router
// alike: --help and --version their text (code 0), a value refused
// kExitConfig (CliExit::err its one line), anything else (an unknown flag,
// a missing value or option) kExitUsage.
CliExit cli_parse_failure(const CLI::App& app, const CLI::ParseError& e);

}  // namespace kvtier::wire
