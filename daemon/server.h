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
// its session, which checks privileged calls against them (wire/access.h).
//
// The optional TCP listener (http_listen) serves JSON-RPC and HTTP alike,
// told by the first byte as on the Unix socket; with an API key, HTTP asks
// for it as a Bearer token and JSON-RPC as an `auth` call (session.h). A TCP
// peer has no credentials, so it is never privileged.
//
// Watchdog: when systemd's watchdog is on, the io thread sends WATCHDOG=1 at
// half the timeout, so a wedged event loop gets the daemon restarted.
//
// Stopping (SIGINT, SIGTERM or the `shutdown` method), in two phases:
//  1. drain: stop accepting and remove the socket file; the engine refuses
//     new requests (-32002) while those running go on, for at most
//     drain_timeout seconds. Open connections stay usable meanwhile (stats,
//     cancel), and the watchdog keeps pinging. A second SIGINT/SIGTERM ends
//     the drain at once.
//  2. stop: cancel every request still running through the engine (their
//     clients get their final responses, finish_reason "cancelled"), flush
//     and close every session. io_context::run() then returns for lack of
//     work, and main exits 0.
//
// Configuration: the Server holds the DaemonConfig in force and is the
// DaemonControl sessions change it through. A change is applied whole or not
// at all: the scheduler's part and max_pending on the engine thread first
// (the one step that can refuse), then the rest here (log level,
// max_line_bytes, drain_timeout). Changes are applied one at a time, in order.
//
// SIGHUP: re-reads the --config file (ServerOptions::reload) and applies its
// runtime settings as config.set would, logging each change; a setting that
// is not runtime but differs is logged as a warning and kept until a
// restart. A file that does not parse changes nothing and is logged as an
// error.
//
// Thread-safety: everything runs on the io_context's thread.
#pragma once

#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "daemon/config.h"
#include "daemon/control.h"
#include "daemon/engine_loop.h"
#include "daemon/http/routes.h"
#include "daemon/session.h"
#include "wire/chat_template.h"
#include "wire/http/connection.h"
#include "wire/http/listener.h"

namespace kvtier::daemon {

struct ServerOptions {
  // The settings in force at start (socket_path, max_connections and the
  // runtime ones are used here); the engine must have been created with
  // the same scheduler settings and max_pending.
  DaemonConfig config;
  SessionOptions session;
  // Group the socket file is chowned to (config.socket_group resolved);
  // nullopt keeps the daemon's own group. Ignored for an activated socket
  // (SocketGroup= there).
  std::optional<gid_t> socket_group;
  // Parses the command line and --config file again, for SIGHUP; null when
  // the daemon was started without --config (SIGHUP is then logged and
  // ignored).
  std::function<std::expected<DaemonConfig, std::string>()> reload;
  // A listening Unix stream socket inherited from systemd (sd_listen_fds), or
  // -1 to bind socket_path. The server takes ownership of it.
  int activated_fd = -1;
  // The model's, for /v1/chat/completions (main loads it with the model).
  wire::ChatTemplate chat_template;
  // The HTTP API's TCP listener (http_listen), checked by main; none when
  // nullopt.
  std::optional<wire::http::ListenSpec> http_listen;
};

class Server : public DaemonControl {
 public:
  // `engine` must be started and outlive the server.
  Server(asio::io_context& io, EngineLoop& engine, ServerOptions options);
  ~Server();

  // Removes a stale socket file, binds, listens, sets the socket's mode to
  // 0660 and its group; or adopts the activated socket. Then binds the HTTP
  // API's TCP listener, if any. Errors name the path or address and the
  // reason.
  std::expected<void, std::string> listen();

  // Starts accepting, watching SIGINT/SIGTERM and pinging the watchdog, and
  // tells systemd the daemon is ready. REQUIRES: listen() succeeded.
  void start();

  // Begins stopping (see the top of this file). Idempotent; safe to call
  // from a handler.
  void stop();

  // DaemonControl.
  const DaemonConfig& config() const override { return config_; }
  void config_update(ConfigChangeFn change, ConfigDoneFn done) override;
  int connections() const override {
    return static_cast<int>(sessions_.size() + http_connections_.size());
  }
  bool stopping() const override { return stopping_; }
  void shutdown() override;

 private:
  struct PendingUpdate {
    ConfigChangeFn change;
    ConfigDoneFn done;
  };

  void accept();
  std::expected<void, std::string> listen_tcp();
  void accept_tcp();
  // Whether one more connection fits max_connections; logs when not.
  bool room_for_one_more();
  // Serves a connection that turned out to speak HTTP: `peer` on the Unix
  // socket, an `api_key` on TCP (empty: none asked).
  void serve_http(asio::generic::stream_protocol::socket socket, std::string already_read,
                  std::optional<wire::PeerCredentials> peer, std::string api_key);
  void watchdog_ping();
  void wait_signal();
  void reload();
  // Applies the head of updates_, then the next ones.
  void update_next();
  // Phase 2 of stopping. Idempotent.
  void finish_stop(const std::string& why);

  asio::io_context& io_;
  EngineLoop& engine_;
  ServerOptions options_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::ip::tcp::acceptor tcp_acceptor_;
  asio::signal_set signals_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer drain_timer_;
  DaemonConfig config_;
  std::deque<PendingUpdate> updates_;  // head: being applied
  std::optional<std::chrono::microseconds> watchdog_interval_;
  std::unordered_map<Session*, std::shared_ptr<Session>> sessions_;
  http::HttpCounts http_counts_;
  http::Context http_context_;
  http::DaemonService http_service_{http_context_};
  std::unordered_map<wire::http::Connection*, std::shared_ptr<wire::http::Connection>>
      http_connections_;
  bool listening_ = false;
  bool owns_socket_file_ = false;  // bound here, so removed on exit
  bool stopping_ = false;          // draining or stopped: no more accepting
  bool stopped_ = false;           // finish_stop ran
};

}  // namespace kvtier::daemon
