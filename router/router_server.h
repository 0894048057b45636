// kvtier-router's listening side: the Unix socket clients connect to (the
// same rules as kvtierd's: a stale socket file is replaced, a live one
// refused, mode 0660), its sessions, and SIGINT/SIGTERM or `shutdown`,
// which close every session (cancelling their requests on the daemons) and
// stop; the daemons go on.
//
// Thread-safety: everything on the io_context's thread.
#pragma once

#include <boost/asio.hpp>
#include <cstddef>
#include <expected>
#include <memory>
#include <string>
#include <unordered_map>

#include "router/client_session.h"
#include "router/router.h"

namespace kvtier::router {

struct RouterServerOptions {
  std::string socket_path;
  int max_connections = 1024;
  SessionLimits session;
};

class RouterServer {
 public:
  RouterServer(asio::io_context& io, Router& router, RouterServerOptions options);
  ~RouterServer();

  // Binds and listens; errors name the path and the reason.
  std::expected<void, std::string> listen();
  // Starts accepting and the daemon links, and watches the signals.
  void start();
  void stop();

 private:
  void accept();

  asio::io_context& io_;
  Router& router_;
  RouterServerOptions options_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer shutdown_timer_;
  std::unordered_map<ClientSession*, std::shared_ptr<ClientSession>> sessions_;
  bool owns_socket_file_ = false;
  bool stopped_ = false;
};

}  // namespace kvtier::router
