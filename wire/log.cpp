#include "wire/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace kvtier::wire {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
// Set once by main before anything logs (log_program_set).
const char* g_program = "kvtierd";

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

// `message` as a line of the log, with its prefix.
std::string formatted(LogLevel level, std::string_view message) {
  static const bool journald = std::getenv("JOURNAL_STREAM") != nullptr;
  std::string line;
  if (journald) {
    line = "<" + std::to_string(static_cast<int>(level)) + ">";
  } else {
    line = timestamp() + g_program + ": ";
    line += to_string(level);
    line += ": ";
  }
  line += message;
  line += '\n';
  return line;
}

// Writes `line` whole to stderr, or as much as stderr takes: there is
// nowhere to report a failed write to stderr.
void write_all(std::string_view line) {
  while (!line.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    line.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Lines reach stderr from a thread of their own: a stderr that blocks (a
// stalled journald, a pipe nobody reads) must not stall the thread that
// logs, the engine's above all, which logs every finished request. The
// queue is bounded; a line that finds it full is dropped and counted, and
// the count is written once the writer has caught up. At exit the queue is
// drained for at most kExitDrain, so a blocked stderr cannot hold exit.
// The writer is never destroyed: at exit it may still be blocked in
// write(), and must not find its mutex gone.
class LogWriter {
 public:
  static LogWriter& get() {
    static LogWriter* writer = new LogWriter;
    return *writer;
  }

  void push(std::string line) {
    // A forked child (a test's) has no writer thread: it writes itself.
    if (::getpid() != pid_) return write_all(line);
    {
      std::lock_guard lock(mutex_);
      if (queue_.size() >= kMaxQueued) {
        ++dropped_;
        return;
      }
      queue_.push_back(std::move(line));
    }
    ready_.notify_one();
  }

  // Waits until every line queued so far is written, or `timeout` passes.
  bool flush(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return drained_.wait_for(lock, timeout, [&] { return queue_.empty() && !writing_; });
  }

 private:
  static constexpr std::size_t kMaxQueued = 4096;
  static constexpr std::chrono::milliseconds kExitDrain{2000};

  LogWriter() : pid_(::getpid()) {
    std::thread([this] { run(); }).detach();
    std::atexit([] { (void)LogWriter::get().flush(kExitDrain); });
  }

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] { return !queue_.empty(); });
      std::deque<std::string> lines;
      lines.swap(queue_);
      const std::uint64_t dropped = std::exchange(dropped_, 0);
      writing_ = true;
      lock.unlock();
      for (const std::string& line : lines) write_all(line);
      if (dropped > 0) {
        write_all(formatted(LogLevel::kWarning,
                            std::to_string(dropped) +
                                " log lines dropped: stderr took them slower than they came"));
      }
      lock.lock();
      writing_ = false;
      if (queue_.empty()) drained_.notify_all();
    }
  }

  const pid_t pid_;
  std::mutex mutex_;
  std::condition_variable ready_, drained_;
  std::deque<std::string> queue_;
  std::uint64_t dropped_ = 0;
  bool writing_ = false;
};

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

void log_program_set(const char* name) { g_program = name; }

void log_level_set(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_write(LogLevel level, std::string_view message) {
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
  LogWriter::get().push(formatted(level, message));
}

bool log_flush(std::chrono::milliseconds timeout) { return LogWriter::get().flush(timeout); }

}  // namespace kvtier::wire
