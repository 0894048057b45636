#include "daemon/systemd_notify.h"

#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstring>

#include "wire/log.h"

namespace kvtier::daemon {

using wire::log_debug;

namespace {

// A notification failure is never fatal: the daemon serves either way, and
// systemd reports a missing READY=1 or WATCHDOG=1 by itself.
void notify(const std::string& message) {
  const int r = sd_notify(0, message.c_str());
  if (r < 0) log_debug("sd_notify failed: " + std::string(std::strerror(-r)));
}

}  // namespace

void notify_ready(const std::string& status) { notify("READY=1\nSTATUS=" + status); }

void notify_status(const std::string& status) { notify("STATUS=" + status); }

void notify_watchdog() { notify("WATCHDOG=1"); }

void notify_stopping(const std::string& status) { notify("STOPPING=1\nSTATUS=" + status); }

std::optional<std::chrono::microseconds> watchdog_ping_interval() {
  std::uint64_t usec = 0;
  // unset_environment = 0: a restart of this process by itself (none today)
  // would need the variables again.
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec / 2);
}

std::expected<std::optional<int>, std::string> activated_socket() {
  const int n = sd_listen_fds(1);
  if (n < 0) return std::unexpected("sd_listen_fds failed: " + std::string(std::strerror(-n)));
  if (n == 0) return std::optional<int>{};
  if (n > 1) {
    return std::unexpected("systemd passed " + std::to_string(n) +
                           " sockets; kvtierd takes exactly one (one ListenStream=)");
  }
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) <= 0) {
    return std::unexpected(std::string(
        "the socket systemd passed is not a listening Unix stream socket (ListenStream=PATH)"));
  }
  return std::optional<int>{fd};
}

}  // namespace kvtier::daemon
