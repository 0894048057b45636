// The listening side of kvtierd: the Unix-socket acceptor, the set of live
// sessions, and the signals that stop the daemon.
//
// Start-up: a stale socket file (one nobody answers on, left by a daemon that
// died) is removed; a live one means another kvtierd runs and listen() fails
// rather than stealing its path. Any other kind of file at the path is left
// alone and refused. Under socket activation systemd owns the socket file:
// the daemon takes the listening fd it was given and never binds, chmods or
// removes anything.
//
// Each connection's peer credentials are logged at info level and handed to
// its session, which checks privileged calls against them (access.h).
//
// Watchdog: when systemd's watchdog is on, the io thread sends WATCHDOG=1 at
// half the timeout, so a wedged event loop gets the daemon restarted.
//
// Stopping (SIGINT, SIGTERM or the `shutdown` method): stop accepting, cancel
// every running request through the engine (their clients get their final
// responses with finish_reason "cancelled"), flush and close every session,
// remove the socket file. io_context::run() then returns for lack of work,
// and main exits 0.
//
// Thread-safety: everything runs on the io_context's thread.
#pragma once

#include <sys/types.h>

#include <asio.hpp>
#include <chrono>
#include <cstddef>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "daemon/engine_loop.h"
#include "daemon/session.h"

namespace kvtier::daemon {

struct ServerOptions {
  std::string socket_path;
  SessionOptions session;
  // Connections served at once; one more gets an error line and is closed.
  int max_connections = 64;
  // Group the socket file is chowned to (--socket-group); nullopt keeps the
  // daemon's own group. Ignored for an activated socket (SocketGroup= there).
  std::optional<gid_t> socket_group;
  // A listening Unix stream socket inherited from systemd (sd_listen_fds), or
  // -1 to bind socket_path. The server takes ownership of it.
  int activated_fd = -1;
};

class Server {
 public:
  // `engine` must be started and outlive the server.
  Server(asio::io_context& io, EngineLoop& engine, ServerOptions options);
  ~Server();

  // Removes a stale socket file, binds, listens, sets the socket's mode to
  // 0660 and its group; or adopts the activated socket. Errors name the path
  // and the reason.
  std::expected<void, std::string> listen();

  // Starts accepting, watching SIGINT/SIGTERM and pinging the watchdog, and
  // tells systemd the daemon is ready. REQUIRES: listen() succeeded.
  void start();

  // See the top of this file. Idempotent; safe to call from a handler.
  void stop();

 private:
  void accept();
  void watchdog_ping();

  asio::io_context& io_;
  EngineLoop& engine_;
  ServerOptions options_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer watchdog_timer_;
  std::optional<std::chrono::microseconds> watchdog_interval_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  bool listening_ = false;
  bool owns_socket_file_ = false;  // bound here, so removed on exit
  bool stopping_ = false;
};

}  // namespace kvtier::daemon
