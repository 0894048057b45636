#include "router/router_server.h"

#include <csignal>
#include <filesystem>

#include "daemon/log.h"
#include "daemon/protocol.h"
#include "daemon/server.h"

namespace kvtier::router {

using namespace kvtier::daemon;
using stream = asio::local::stream_protocol;

RouterServer::RouterServer(asio::io_context& io, Router& router, RouterServerOptions options)
    : io_(io),
      router_(router),
      options_(std::move(options)),
      acceptor_(io),
      signals_(io),
      shutdown_timer_(io) {}

RouterServer::~RouterServer() { stop(); }

std::expected<void, std::string> RouterServer::listen() {
  if (auto ok = unix_socket_listen(acceptor_, options_.socket_path, std::nullopt); !ok) return ok;
  owns_socket_file_ = true;
  return {};
}

void RouterServer::start() {
  // After a moment, so the `shutdown` call's own answer is written first.
  router_.on_shutdown = [this] {
    shutdown_timer_.expires_after(std::chrono::milliseconds(100));
    shutdown_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) stop();
    });
  };
  router_.start();
  signals_.add(SIGINT);
  signals_.add(SIGTERM);
  signals_.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    log_info(std::string("stopping on ") + (signo == SIGINT ? "SIGINT" : "SIGTERM"));
    stop();
  });
  log_info("listening on " + options_.socket_path + ", routing to " +
           std::to_string(router_.daemons()) + " daemons");
  accept();
}

void RouterServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  signals_.cancel(ignored);
  shutdown_timer_.cancel();
  if (owns_socket_file_) {
    std::error_code fs_ec;
    std::filesystem::remove(options_.socket_path, fs_ec);
  }
  auto sessions = std::move(sessions_);
  for (auto& [raw, session] : sessions) session->close();
  router_.stop();
}

void RouterServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, stream::socket socket) {
    if (stopped_) return;
    if (ec) {
      log_warning("accept failed: " + ec.message());
    } else if (static_cast<int>(sessions_.size()) >= options_.max_connections) {
      log_warning("refused a connection: max_connections (" +
                  std::to_string(options_.max_connections) + ") are open");
      const std::string line = error_line(
          nullptr, {rpc_code::kTooManyPending, "too many connections (max_connections)"});
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(line), ignored);
    } else {
      const auto peer = peer_credentials(socket.native_handle());
      auto session =
          std::make_shared<ClientSession>(std::move(socket), router_, options_.session, peer,
                                          [this](ClientSession* s) { sessions_.erase(s); });
      sessions_.emplace(session.get(), session);
      session->start();
    }
    accept();
  });
}

}  // namespace kvtier::router
