#include "daemon/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace kvtier::daemon {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

}  // namespace

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

std::expected<LogLevel, std::string> log_level_parse(std::string_view name) {
  for (LogLevel l : {LogLevel::kError, LogLevel::kWarning, LogLevel::kInfo, LogLevel::kDebug}) {
    if (name == to_string(l)) return l;
  }
  return std::unexpected("unknown log level '" + std::string(name) +
                         "' (expected error, warning, info or debug)");
}

void log_level_set(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_write(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
  static const bool journald = std::getenv("JOURNAL_STREAM") != nullptr;
  std::string line;
  if (journald) {
    line = "<" + std::to_string(static_cast<int>(level)) + ">";
  } else {
    line = "kvtierd: ";
    line += to_string(level);
    line += ": ";
  }
  line += message;
  line += '\n';
  // Best effort: there is nowhere to report a failed write to stderr.
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace kvtier::daemon
