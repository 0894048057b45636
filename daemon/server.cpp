#include "daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <utility>

#include "daemon/systemd_notify.h"
#include "wire/access.h"
#include "wire/generic_socket.h"
#include "wire/log.h"
#include "wire/protocol.h"
#include "wire/unix_socket.h"

namespace kvtier::daemon {

using wire::as_generic;
using wire::error_line;
using wire::log_error;
using wire::log_info;
using wire::log_level_set;
using wire::log_number;
using wire::log_warning;
using wire::peer_credentials;
using wire::PeerCredentials;
using wire::unix_socket_listen;
namespace rpc_code = wire::rpc_code;

namespace fs = std::filesystem;
using stream = asio::local::stream_protocol;
using generic_stream = asio::generic::stream_protocol;

Server::Server(asio::io_context& io, EngineLoop& engine, ServerOptions options)
    : io_(io),
      engine_(engine),
      options_(std::move(options)),
      acceptor_(io),
      tcp_acceptor_(io),
      signals_(io, SIGINT, SIGTERM, SIGHUP),
      watchdog_timer_(io),
      drain_timer_(io),
      config_(options_.config),
      http_context_{engine, *this, options_.chat_template, http_counts_,
                    std::chrono::steady_clock::now()} {
  options_.session.chat_template = &options_.chat_template;
}

Server::~Server() {
  if (owns_socket_file_) {
    std::error_code ignored;
    fs::remove(config_.socket_path, ignored);
  }
}

std::expected<void, std::string> Server::listen() {
  const std::string& path = config_.socket_path;
  boost::system::error_code ec;
  if (options_.activated_fd >= 0) {
    acceptor_.assign(stream(), options_.activated_fd, ec);
    if (ec) return std::unexpected("cannot use the socket systemd passed: " + ec.message());
    // Report the path systemd bound, not --socket, in the log.
    const auto local = acceptor_.local_endpoint(ec);
    if (!ec) config_.socket_path = local.path();
    listening_ = true;
    return listen_tcp();
  }
  if (auto ok = unix_socket_listen(acceptor_, path, options_.socket_group); !ok) return ok;
  listening_ = true;
  owns_socket_file_ = true;
  return listen_tcp();
}

std::expected<void, std::string> Server::listen_tcp() {
  if (!options_.http_listen) return {};
  return wire::http::tcp_listen(tcp_acceptor_, options_.http_listen->endpoint);
}

void Server::wait_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec || stopped_) return;
    if (signo == SIGHUP) {
      reload();
    } else if (!stopping_) {
      log_info(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
      stop();
    } else {
      finish_stop("a second SIGINT/SIGTERM ended the drain");
    }
    // Stopped (drain_timeout 0 stops at once): a pending wait would keep
    // io_context::run() from returning.
    if (!stopped_) wait_signal();
  });
}

void Server::start() {
  wait_signal();
  log_info("listening on " + config_.socket_path +
           (options_.activated_fd >= 0 ? " (socket activation)" : ""));
  watchdog_interval_ = watchdog_ping_interval();
  if (watchdog_interval_) {
    log_info("systemd watchdog on; pinging every " +
             std::to_string(watchdog_interval_->count() / 1000) + " ms");
    watchdog_ping();
  }
  notify_ready("serving on " + config_.socket_path);
  accept();
  if (options_.http_listen) {
    log_info("HTTP API also on " + wire::http::describe(*options_.http_listen));
    accept_tcp();
  }
}

void Server::watchdog_ping() {
  // Sent from the io thread: if the event loop wedges, the pings stop.
  notify_watchdog();
  watchdog_timer_.expires_after(*watchdog_interval_);
  watchdog_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !stopped_) watchdog_ping();
  });
}

bool Server::room_for_one_more() {
  if (connections() < config_.max_connections) return true;
  log_warning("refusing a connection: max_connections reached");
  return false;
}

void Server::accept_tcp() {
  tcp_acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
    if (stopping_) return;
    if (ec) {
      log_warning("HTTP accept failed: " + ec.message());
    } else if (!room_for_one_more()) {
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(wire::http::kBusyAnswer),
                  ignored);  // tiny; the buffer takes it  // tiny; the socket buffer takes it
    } else {
      // JSON-RPC or HTTP, told by the first byte as on the Unix socket. A
      // TCP peer has no credentials: it is never privileged (wire/access.h).
      boost::system::error_code peer_ec;
      const auto peer = socket.remote_endpoint(peer_ec);
      std::ostringstream who;
      if (!peer_ec) who << peer;
      const std::string api_key = options_.http_listen->api_key;
      SessionOptions so = options_.session;
      so.api_key = api_key;
      const auto protocol = peer.protocol();
      auto session = std::make_shared<Session>(
          as_generic(std::move(socket), protocol), engine_, *this, so, std::nullopt,
          [this](Session* s) { sessions_.erase(s); },
          [this, api_key](generic_stream::socket s, std::string bytes) {
            serve_http(std::move(s), std::move(bytes), std::nullopt, api_key);
          });
      sessions_.emplace(session.get(), session);
      log_info("TCP client connected from " + who.str() + " (" + std::to_string(connections()) +
               " connections)");
      session->start();
    }
    accept_tcp();
  });
}

void Server::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, stream::socket socket) {
    if (stopping_) return;
    if (ec) {
      // A transient failure (EMFILE, ECONNABORTED) must not end the daemon's
      // life as a server; log and keep accepting.
      log_warning("accept failed: " + ec.message());
    } else if (!room_for_one_more()) {
      const std::string line = error_line(
          nullptr, {rpc_code::kTooManyPending, "too many connections (max_connections)"});
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(line), ignored);  // tiny; the socket buffer takes it
    } else {
      // No credentials (the peer already vanished) means no privileges: the
      // session treats an unknown peer as an outsider.
      const auto peer = peer_credentials(socket.native_handle());
      auto session = std::make_shared<Session>(
          as_generic(std::move(socket), stream()), engine_, *this, options_.session, peer,
          [this](Session* s) { sessions_.erase(s); },
          [this, peer](generic_stream::socket s, std::string bytes) {
            serve_http(std::move(s), std::move(bytes), peer, {});
          });
      sessions_.emplace(session.get(), session);
      log_info("client connected: " + (peer ? to_string(*peer) : "unknown peer") + " (" +
               std::to_string(connections()) + " connections)");
      session->start();
    }
    accept();
  });
}

void Server::serve_http(generic_stream::socket socket, std::string already_read,
                        std::optional<PeerCredentials> peer, std::string api_key) {
  wire::http::ConnectionOptions o;
  o.max_output_bytes = options_.session.max_output_bytes;
  o.peer = peer;
  o.api_key = std::move(api_key);
  auto connection = wire::http::Connection::make(
      std::move(socket), http_service_, std::move(o),
      [this](wire::http::Connection* c) { http_connections_.erase(c); });
  http_connections_.emplace(connection.get(), connection);
  connection->start(std::move(already_read));
}

void Server::shutdown() {
  // Posted: the session that asked queues its reply before anything stops.
  asio::post(io_, [this] { stop(); });
}

void Server::stop() {
  if (stopping_) return;
  stopping_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  tcp_acceptor_.close(ignored);
  if (owns_socket_file_) {
    std::error_code fs_ignored;
    fs::remove(config_.socket_path, fs_ignored);
    owns_socket_file_ = false;
  }
  listening_ = false;
  const double timeout = config_.drain_timeout;
  if (timeout <= 0) {
    finish_stop("drain_timeout is 0");
    return;
  }
  notify_stopping("stopping: letting running requests finish (up to " + log_number(timeout) +
                  " s)");
  log_info("draining: running requests may finish within drain_timeout (" + log_number(timeout) +
           " s); new ones are refused");
  // The engine posts its final events before it calls back, so they reach
  // the sessions before finish_stop closes them.
  engine_.drain([this] { asio::post(io_, [this] { finish_stop("every request finished"); }); });
  drain_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout)));
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) finish_stop("drain_timeout passed; cancelling the requests still running");
  });
}

void Server::finish_stop(const std::string& why) {
  if (stopped_) return;
  stopped_ = true;
  log_info("stopping: " + why);
  notify_stopping("stopping: " + why);
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  watchdog_timer_.cancel();
  drain_timer_.cancel();
  updates_.clear();
  // Joins the engine thread; the final "cancelled" events it posts on the way
  // out are queued on io_ before the session stop below, so clients get them.
  engine_.stop();
  asio::post(io_, [this] {
    // stop() may close a connection, which erases it from its map.
    auto sessions = sessions_;
    for (auto& [ptr, session] : sessions) session->stop();
    auto http_connections = http_connections_;
    for (auto& [ptr, connection] : http_connections) connection->stop();
  });
}

void Server::config_update(ConfigChangeFn change, ConfigDoneFn done) {
  if (stopped_) return;
  updates_.push_back({std::move(change), std::move(done)});
  if (updates_.size() == 1) update_next();
}

void Server::update_next() {
  while (!updates_.empty()) {
    auto next = updates_.front().change(config_);
    if (!next) {
      auto done = std::move(updates_.front().done);
      updates_.pop_front();
      done(std::unexpected(next.error()));
      continue;
    }
    // The engine's part first: it is the one that may still refuse.
    engine_.reconfigure(next->scheduler, next->max_pending,
                        [this, next = *next](std::expected<void, std::string> ok) {
                          asio::post(io_, [this, next, ok] {
                            if (stopped_ || updates_.empty()) return;
                            auto done = std::move(updates_.front().done);
                            updates_.pop_front();
                            if (!ok) {
                              done(std::unexpected(ok.error()));
                            } else {
                              auto changes = config_diff(config_, next);
                              config_ = next;
                              log_level_set(config_.log_level);
                              done(std::move(changes));
                            }
                            update_next();
                          });
                        });
    return;
  }
}

void Server::reload() {
  if (!options_.reload) {
    log_warning("SIGHUP: kvtierd was started without --config; nothing to reload");
    return;
  }
  auto loaded = options_.reload();
  if (!loaded) {
    log_error("SIGHUP: cannot reload the config file, nothing changed: " + loaded.error());
    return;
  }
  for (const SettingChange& c : config_diff(config_, *loaded)) {
    if (c.setting->runtime) continue;
    log_warning("SIGHUP: " + std::string(c.setting->name) + " changed (" + c.from.dump() + " -> " +
                c.to.dump() + ") but only takes effect after a restart; keeping " + c.from.dump());
  }
  config_update(
      [loaded = *loaded](const DaemonConfig& current) {
        return config_with_runtime_of(current, loaded);
      },
      [](const std::expected<std::vector<SettingChange>, std::string>& done) {
        if (!done) {
          log_error("SIGHUP: the config file's runtime settings were refused, nothing changed: " +
                    done.error());
          return;
        }
        const std::vector<SettingChange>& changes = done.value();
        if (changes.empty()) log_info("SIGHUP: reloaded; no runtime setting changed");
        for (const SettingChange& c : changes) {
          log_info("SIGHUP: " + std::string(c.setting->name) + " " + c.from.dump() + " -> " +
                   c.to.dump());
        }
      });
}

}  // namespace kvtier::daemon
