// A kvtierd (or kvtier-router) child process for the soak and the comparison runs: started on a
// socket in a fresh /tmp folder, its stderr in a log file, stopped through
// the protocol (`shutdown`), killed if it does not exit in time.
#pragma once

#include <sys/types.h>

#include <expected>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/child_process.h"

namespace kvtier::bench {

// The long flags `binary --help` lists, each with the rest of its help line
// (its type and default: "INT:INT in [1 - 1048576]=8", or "" for a flag
// without a value). Empty when the binary cannot be run.
std::map<std::string, std::string> daemon_flags(const std::string& binary);

// The kvtierd of this build tree, beside the running bench binary
// (build/bench/soak -> build/daemon/kvtierd); `argv0` when /proc has no link.
std::string default_kvtierd(const char* argv0);

// The kvtier-router of this build tree (build/router/kvtier-router).
std::string default_router(const char* argv0);

class DaemonProcess {
 public:
  // Starts `binary --socket <tmp>/kvtierd.sock <args...>` and waits until the
  // socket accepts a connection (at most `ready_timeout_s`).
  static std::expected<std::unique_ptr<DaemonProcess>, std::string> start(
      const std::string& binary, const std::vector<std::string>& args, const std::string& log_path,
      double ready_timeout_s = 60);
  ~DaemonProcess();  // kills and reaps a daemon still running
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  pid_t pid() const { return child_.pid(); }
  const std::string& socket() const { return socket_; }
  const std::string& log_path() const { return log_path_; }

  // Asks it to stop (`shutdown`), waits up to `timeout_s`, then SIGKILLs.
  // True when it exited by itself with status 0.
  bool stop(double timeout_s = 30);

  // SIGKILLs it and reaps it, as a crash would end it (a fault soak); its
  // socket file stays behind, stale.
  void kill();
  // Starts the same binary with the same arguments again on the same
  // socket (after kill()), logging to `log_path`, and waits as start() does.
  std::expected<void, std::string> restart(const std::string& log_path,
                                           double ready_timeout_s = 60);

 private:
  DaemonProcess() = default;
  std::expected<void, std::string> spawn(double ready_timeout_s);

  util::ChildProcess child_;
  std::string binary_;
  std::vector<std::string> args_;
  std::string dir_, socket_, log_path_;
};

}  // namespace kvtier::bench
