// The daemon's side of systemd's service protocol (sd_notify(3)), and
// socket activation (sd_listen_fds(3)).
//
// Every call here is a no-op outside systemd: without NOTIFY_SOCKET the
// notifications go nowhere, without LISTEN_FDS there is no inherited socket,
// and without WATCHDOG_USEC the watchdog is off. So the daemon calls them
// unconditionally and behaves the same on a terminal.
//
// Thread-safety: the notify calls may be made from any thread.
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <string>

namespace kvtier::daemon {

// READY=1 with a STATUS= line: the socket accepts connections. Type=notify
// units count as started only then, so clients ordered after the service
// never find it missing.
void notify_ready(const std::string& status);

// STATUS=...: the one-line state `systemctl status` shows.
void notify_status(const std::string& status);

// WATCHDOG=1: the event loop is alive.
void notify_watchdog();

// STOPPING=1 with a STATUS= line: shutdown has begun.
void notify_stopping(const std::string& status);

// How often to send WATCHDOG=1 — half of WATCHDOG_USEC, so one late ping
// does not get the daemon killed — or nullopt when the watchdog is off.
std::optional<std::chrono::microseconds> watchdog_ping_interval();

// The listening socket systemd passed (a .socket unit), or nullopt when
// none was passed. Errors: more than one fd, or one that is not a listening
// Unix stream socket. The LISTEN_* variables are cleared so child processes
// do not take the socket for their own.
std::expected<std::optional<int>, std::string> activated_socket();

}  // namespace kvtier::daemon
