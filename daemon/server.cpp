#include "daemon/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <utility>

#include "daemon/access.h"
#include "daemon/log.h"
#include "daemon/protocol.h"
#include "daemon/systemd_notify.h"

namespace kvtier::daemon {

namespace fs = std::filesystem;
using stream = asio::local::stream_protocol;

Server::Server(asio::io_context& io, EngineLoop& engine, ServerOptions options)
    : io_(io),
      engine_(engine),
      options_(std::move(options)),
      acceptor_(io),
      signals_(io, SIGINT, SIGTERM),
      watchdog_timer_(io) {}

Server::~Server() {
  if (owns_socket_file_) {
    std::error_code ignored;
    fs::remove(options_.socket_path, ignored);
  }
}

std::expected<void, std::string> Server::listen() {
  const std::string& path = options_.socket_path;
  std::error_code ec;
  if (options_.activated_fd >= 0) {
    acceptor_.assign(stream(), options_.activated_fd, ec);
    if (ec) return std::unexpected("cannot use the socket systemd passed: " + ec.message());
    // Report the path systemd bound, not --socket, in the log.
    const auto local = acceptor_.local_endpoint(ec);
    if (!ec) options_.socket_path = local.path();
    listening_ = true;
    return {};
  }
  const auto st = fs::symlink_status(path, ec);
  if (!ec && fs::exists(st)) {
    if (!fs::is_socket(st)) {
      return std::unexpected(path + " exists and is not a socket; refusing to replace it");
    }
    stream::socket probe(io_);
    probe.connect(stream::endpoint(path), ec);
    if (!ec) return std::unexpected("another daemon is listening on " + path);
    log_info("removing stale socket " + path);
    fs::remove(path, ec);
    if (ec) return std::unexpected("cannot remove stale socket " + path + ": " + ec.message());
  }
  acceptor_.open(stream(), ec);
  if (!ec) acceptor_.bind(stream::endpoint(path), ec);
  if (ec) return std::unexpected("cannot bind " + path + ": " + ec.message());
  listening_ = true;
  owns_socket_file_ = true;
  // Mode and group before listen(): no client can connect through a mode
  // wider than the one asked for, even for a moment.
  // Owner and group only: a client can make the daemon burn CPU and memory.
  if (::chmod(path.c_str(), 0660) != 0) {
    return std::unexpected("cannot chmod " + path + ": " + std::generic_category().message(errno));
  }
  if (options_.socket_group &&
      ::chown(path.c_str(), static_cast<uid_t>(-1), *options_.socket_group) != 0) {
    return std::unexpected("cannot give " + path + " to group " +
                           std::to_string(*options_.socket_group) + ": " +
                           std::generic_category().message(errno));
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return std::unexpected("cannot listen on " + path + ": " + ec.message());
  return {};
}

void Server::start() {
  signals_.async_wait([this](std::error_code ec, int signo) {
    if (ec) return;
    log_info(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
    stop();
  });
  log_info("listening on " + options_.socket_path +
           (options_.activated_fd >= 0 ? " (socket activation)" : ""));
  watchdog_interval_ = watchdog_ping_interval();
  if (watchdog_interval_) {
    log_info("systemd watchdog on; pinging every " +
             std::to_string(watchdog_interval_->count() / 1000) + " ms");
    watchdog_ping();
  }
  notify_ready("serving on " + options_.socket_path);
  accept();
}

void Server::watchdog_ping() {
  // Sent from the io thread: if the event loop wedges, the pings stop.
  notify_watchdog();
  watchdog_timer_.expires_after(*watchdog_interval_);
  watchdog_timer_.async_wait([this](std::error_code ec) {
    if (!ec && !stopping_) watchdog_ping();
  });
}

void Server::accept() {
  acceptor_.async_accept([this](std::error_code ec, stream::socket socket) {
    if (stopping_) return;
    if (ec) {
      // A transient failure (EMFILE, ECONNABORTED) must not end the daemon's
      // life as a server; log and keep accepting.
      log_warning("accept failed: " + ec.message());
    } else if (static_cast<int>(sessions_.size()) >= options_.max_connections) {
      log_warning("refusing a connection: max_connections reached");
      const std::string line = error_line(
          nullptr, {rpc_code::kTooManyPending, "too many connections (max_connections)"});
      std::error_code ignored;
      asio::write(socket, asio::buffer(line), ignored);  // tiny; the socket buffer takes it
    } else {
      // No credentials (the peer already vanished) means no privileges: the
      // session treats an unknown peer as an outsider.
      const auto peer = peer_credentials(socket.native_handle());
      auto session = std::make_shared<Session>(
          std::move(socket), engine_, options_.session, peer,
          [this] { asio::post(io_, [this] { stop(); }); },
          [this](Session* s) { sessions_.erase(s); });
      sessions_.emplace(session.get(), session);
      log_info("client connected: " + (peer ? to_string(*peer) : "unknown peer") + " (" +
               std::to_string(sessions_.size()) + " connections)");
      session->start();
    }
    accept();
  });
}

void Server::stop() {
  if (stopping_) return;
  stopping_ = true;
  notify_stopping("stopping: cancelling running requests");
  std::error_code ignored;
  acceptor_.close(ignored);
  signals_.cancel(ignored);
  watchdog_timer_.cancel();
  // Joins the engine thread; the final "cancelled" events it posts on the way
  // out are queued on io_ before the session stops below, so clients get them.
  engine_.stop();
  asio::post(io_, [this] {
    // stop() may close a session, which erases it from sessions_.
    auto sessions = sessions_;
    for (auto& [ptr, session] : sessions) session->stop();
  });
  if (owns_socket_file_) {
    fs::remove(options_.socket_path, ignored);
    owns_socket_file_ = false;
  }
  listening_ = false;
}

}  // namespace kvtier::daemon
