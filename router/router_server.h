// kvtier-router's listening side: the Unix socket clients connect to (the
// same rules as kvtierd's: a stale socket file is replaced, a live one
// refused, mode 0660), where each connection speaks JSON-RPC (a
// ClientSession) or HTTP (told by its first byte, served by the HttpFront);
// the optional TCP listener (--http-listen, kvtierd's http_listen rules: an
// API key beyond loopback, asked of HTTP as a Bearer token and of JSON-RPC
// by `auth`), which serves both the same way; max_connections over all; and
// the signals, as kvtierd takes them (daemon/server.h, wire/unix_socket.h):
//
//  - SIGINT, SIGTERM or `shutdown` stop the router in two phases, the
//    daemons going on. 1. drain: stop accepting and remove the socket file;
//    a new request on an open connection is refused (kShuttingDown, HTTP
//    503: Router::drain) while those in flight on daemons go on, for at
//    most drain_timeout seconds; open connections stay usable meanwhile. A
//    second SIGINT/SIGTERM ends the drain at once. 2. stop: close every
//    connection (which cancels its requests still running on the daemons)
//    and the daemon links; io_context::run() returns for lack of work.
//  - SIGHUP: the router has no config file to read again; it says so and
//    goes on (without a handler SIGHUP would kill it).
//  - SIGPIPE is ignored (main): a write to a peer gone is an error code.
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
#include "router/http_front.h"
#include "router/router.h"
#include "wire/http/connection.h"
#include "wire/http/listener.h"

namespace kvtier::router {

struct RouterServerOptions {
  std::string socket_path;
  int max_connections = 1024;
  double drain_timeout = 10;  // --drain-timeout, as kvtierd's drain_timeout
  SessionLimits session;
  HttpFrontOptions http;
  std::optional<wire::http::ListenSpec> http_listen;  // none: the Unix socket only
};

class RouterServer {
 public:
  RouterServer(asio::io_context& io, Router& router, RouterServerOptions options);
  ~RouterServer();

  // Binds and listens (the Unix socket, and the TCP port if asked); errors
  // name the path or address and the reason.
  std::expected<void, std::string> listen();
  // Starts accepting and the daemon links, and watches the signals.
  void start();
  // Begins the drain (phase 1 above). Idempotent.
  void stop();
  // Client connections open now, JSON-RPC and HTTP.
  int connections() const { return static_cast<int>(sessions_.size() + http_connections_.size()); }

 private:
  void wait_signal();
  // Ends the drain when the router has no request left on a daemon, or
  // drain_timeout has passed; checked every kDrainPoll.
  void wait_drained();
  // Phase 2: closes everything. Idempotent.
  void finish_stop(const std::string& why);
  void accept();
  void accept_tcp();
  // Whether one more connection fits max_connections; logs when not.
  bool room_for_one_more();
  // Serves a connection (JSON-RPC, or HTTP by its first byte): `peer` on
  // the Unix socket, none on TCP, where `limits` carries the API key.
  void serve(asio::generic::stream_protocol::socket socket,
             std::optional<wire::PeerCredentials> peer, SessionLimits limits);

  asio::io_context& io_;
  Router& router_;
  RouterServerOptions options_;
  HttpFront front_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::ip::tcp::acceptor tcp_acceptor_;
  asio::signal_set signals_;
  asio::steady_timer shutdown_timer_;
  asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_{};
  std::unordered_map<ClientSession*, std::shared_ptr<ClientSession>> sessions_;
  std::unordered_map<wire::http::Connection*, std::shared_ptr<wire::http::Connection>>
      http_connections_;
  bool owns_socket_file_ = false;
  bool stopping_ = false;  // draining or stopped
  bool stopped_ = false;
};

}  // namespace kvtier::router
