#include "wire/cli_exit.h"

#include <CLI/CLI.hpp>
#include <sstream>

namespace kvtier::wire {

CliExit cli_parse_failure(const CLI::App& app, const CLI::ParseError& e) {
  CliExit exit;
  std::ostringstream out, err;
  const int code = app.exit(e, out, err);
  exit.out = out.str();
  exit.err = err.str();
  const bool bad_value = dynamic_cast<const CLI::ValidationError*>(&e) != nullptr ||
                         dynamic_cast<const CLI::ConversionError*>(&e) != nullptr;
  exit.code = code == 0 ? 0 : bad_value ? kExitConfig : kExitUsage;
  if (exit.code == kExitConfig) exit.err = e.what();  // a refusal, said as the others are
  return exit;
}

}  // namespace kvtier::wire
