#include "daemon/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace kvtier::daemon {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

// "2026-11-26T02:45:01.123+0000 ": now, local time.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  ::localtime_r(&secs, &local);
  char date[32], zone[8];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &local);
  std::strftime(zone, sizeof zone, "%z", &local);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%03d%s ", date, static_cast<int>(ms), zone);
  return out;
}

}  // namespace

std::string log_number(double v) {
  if (!std::isfinite(v)) return v != v ? "nan" : (v > 0 ? "inf" : "-inf");
  const double a = std::fabs(v);
  const int decimals = a == std::floor(a) || a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string text = buf;
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  return text == "-0" ? "0" : text;
}

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
    line = timestamp() + "kvtierd: ";
    line += to_string(level);
    line += ": ";
  }
  line += message;
  line += '\n';
  // Best effort: there is nowhere to report a failed write to stderr.
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace kvtier::daemon
