// The listening side of kvtierd: the Unix-socket acceptor, the set of live
// sessions, and the signals that stop the daemon.
//
// Start-up: a stale socket file (one nobody answers on, left by a daemon that
// died) is removed; a live one means another kvtierd runs and listen() fails
// rather than stealing its path. Any other kind of file at the path is left
// alone and refused.
//
// Stopping (SIGINT, SIGTERM or the `shutdown` method): stop accepting, cancel
// every running request through the engine (their clients get their final
// responses with finish_reason "cancelled"), flush and close every session,
// remove the socket file. io_context::run() then returns for lack of work,
// and main exits 0.
//
// Thread-safety: everything runs on the io_context's thread.
#pragma once

#include <asio.hpp>
#include <cstddef>
#include <expected>
#include <memory>
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
};

class Server {
 public:
  // `engine` must be started and outlive the server.
  Server(asio::io_context& io, EngineLoop& engine, ServerOptions options);
  ~Server();

  // Removes a stale socket file, binds, listens and sets the socket's mode
  // to 0660. Errors name the path and the reason.
  std::expected<void, std::string> listen();

  // Starts accepting and watching SIGINT/SIGTERM. REQUIRES: listen() succeeded.
  void start();

  // See the top of this file. Idempotent; safe to call from a handler.
  void stop();

 private:
  void accept();

  asio::io_context& io_;
  EngineLoop& engine_;
  ServerOptions options_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::signal_set signals_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  bool listening_ = false;
  bool stopping_ = false;
};

}  // namespace kvtier::daemon
