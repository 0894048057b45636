// Logging to stderr in a form journald understands: under systemd (the
// JOURNAL_STREAM variable is set) each line starts with the syslog priority
// prefix "<N>", which journald turns into the entry's priority and stamps
// with its own time; elsewhere a line starts with the local time to the
// millisecond and the level as a word:
//
//   2026-11-26T02:45:01.123+0000 kvtierd: info: listening on /run/kvtier/kvtierd.sock
//
// Numbers in messages are written as people write them (log_number).
//
// Lines are queued and written by a thread of their own, in the order they
// were logged, so that a stderr that blocks (a stalled journald) stalls no
// thread that logs; a full queue (4096 lines) drops lines and says how many
// once it has room. At exit the queue is drained, for at most 2 s.
//
// Thread-safety: log_write() may be called from any thread; lines from
// threads do not interleave.
#pragma once

#include <chrono>
#include <expected>
#include <string>
#include <string_view>

namespace kvtier::wire {

enum class LogLevel { kError = 3, kWarning = 4, kInfo = 6, kDebug = 7 };

// "error" | "warning" | "info" | "debug".
std::expected<LogLevel, std::string> log_level_parse(std::string_view name);
std::string_view to_string(LogLevel level);

// Messages less severe than `level` are dropped. Default kInfo. May be
// called at any time, from any thread (`config.set`, SIGHUP): lines already
// being written keep the level they were checked against.
void log_level_set(LogLevel level);

// The program name each line starts with outside journald ("kvtierd" unless
// set). Call from main, before anything logs; `name` must live for ever.
void log_program_set(const char* name);
LogLevel log_level();

void log_write(LogLevel level, std::string_view message);

// Waits until every line logged so far has been written to stderr; false
// when `timeout` passed first (stderr is blocked).
bool log_flush(std::chrono::milliseconds timeout);

// A measurement as people write it, never in exponent form: a whole number
// without a fraction ("10"), others with at most three decimals below 1, two
// below 10, one below 100 and none above, trailing zeros dropped ("0.25",
// "3.14", "33.1", "1234").
std::string log_number(double v);

inline void log_error(std::string_view m) { log_write(LogLevel::kError, m); }
inline void log_warning(std::string_view m) { log_write(LogLevel::kWarning, m); }
inline void log_info(std::string_view m) { log_write(LogLevel::kInfo, m); }
inline void log_debug(std::string_view m) { log_write(LogLevel::kDebug, m); }

}  // namespace kvtier::wire
