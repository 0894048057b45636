#include "router/router_server.h"

#include <csignal>
#include <filesystem>

#include "wire/generic_socket.h"
#include "wire/log.h"
#include "wire/protocol.h"
#include "wire/unix_socket.h"

namespace kvtier::router {

using namespace kvtier::wire;
using stream = asio::local::stream_protocol;
using generic_stream = asio::generic::stream_protocol;

RouterServer::RouterServer(asio::io_context& io, Router& router, RouterServerOptions options)
    : io_(io),
      router_(router),
      options_(std::move(options)),
      front_(io, router, options_.http),
      acceptor_(io),
      tcp_acceptor_(io),
      signals_(io),
      shutdown_timer_(io),
      drain_timer_(io) {}

RouterServer::~RouterServer() { finish_stop("the server is destroyed"); }

std::expected<void, std::string> RouterServer::listen() {
  if (auto ok = unix_socket_listen(acceptor_, options_.socket_path, std::nullopt); !ok) return ok;
  owns_socket_file_ = true;
  if (!options_.http_listen) return {};
  return wire::http::tcp_listen(tcp_acceptor_, options_.http_listen->endpoint);
}

void RouterServer::start() {
  // After a moment, so the `shutdown` call's own answer is written first.
  router_.on_shutdown = [this] {
    shutdown_timer_.expires_after(std::chrono::milliseconds(100));
    shutdown_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) stop();
    });
  };
  front_.connections = [this] { return connections(); };
  router_.start();
  signals_.add(SIGINT);
  signals_.add(SIGTERM);
  signals_.add(SIGHUP);
  wait_signal();
  log_info("listening on " + options_.socket_path + ", routing to " +
           std::to_string(router_.daemons()) + " daemons");
  accept();
  if (options_.http_listen) {
    log_info("TCP (HTTP and JSON-RPC) on " + wire::http::describe(*options_.http_listen));
    accept_tcp();
  }
}

void RouterServer::wait_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec || stopped_) return;
    if (signo == SIGHUP) {
      log_warning("SIGHUP: kvtier-router has no config file to read again; nothing changed");
    } else if (!stopping_) {
      log_info(std::string("received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
      stop();
    } else {
      finish_stop("a second SIGINT/SIGTERM ended the drain");
    }
    if (!stopped_) wait_signal();
  });
}

void RouterServer::stop() {
  if (stopping_) return;
  stopping_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  tcp_acceptor_.close(ignored);
  shutdown_timer_.cancel();
  if (owns_socket_file_) {
    std::error_code fs_ec;
    std::filesystem::remove(options_.socket_path, fs_ec);
    owns_socket_file_ = false;
  }
  router_.drain();
  if (options_.drain_timeout <= 0) return finish_stop("drain_timeout is 0");
  log_info("draining: requests in flight may finish within --drain-timeout (" +
           log_number(options_.drain_timeout) + " s); new ones are refused");
  drain_deadline_ = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(options_.drain_timeout));
  wait_drained();
}

void RouterServer::wait_drained() {
  // Polled: a request ends in many places (an answer, a stream's end, a
  // client or daemon gone), and the drain has no hurry to the millisecond.
  constexpr auto kDrainPoll = std::chrono::milliseconds(20);
  if (stopped_) return;
  if (router_.in_flight() == 0) return finish_stop("every request finished");
  if (std::chrono::steady_clock::now() >= drain_deadline_)
    return finish_stop(
        "drain_timeout passed; the requests still running are answered here and cancelled on "
        "their daemons");
  drain_timer_.expires_after(kDrainPoll);
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) wait_drained();
  });
}

void RouterServer::finish_stop(const std::string& why) {
  stop();  // the drain's part first, when it has not begun
  if (stopped_) return;
  stopped_ = true;
  log_info("stopping: " + why);
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  drain_timer_.cancel();
  const RpcError answer{rpc_code::kShuttingDown,
                        "kvtier-router stopped before the daemon answered whole"};
  auto sessions = std::move(sessions_);
  for (auto& [raw, session] : sessions) session->stop(answer);
  front_.stop();
  auto http_connections = http_connections_;
  for (auto& [raw, connection] : http_connections) connection->stop();
  router_.stop();
}

bool RouterServer::room_for_one_more() {
  if (connections() < options_.max_connections) return true;
  log_warning("refused a connection: max_connections (" + std::to_string(options_.max_connections) +
              ") are open");
  return false;
}

void RouterServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, stream::socket socket) {
    if (stopped_) return;
    if (ec) {
      log_warning("accept failed: " + ec.message());
    } else if (!room_for_one_more()) {
      const std::string line = error_line(
          nullptr, {rpc_code::kTooManyPending, "too many connections (max_connections)"});
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(line), ignored);
    } else {
      const auto peer = peer_credentials(socket.native_handle());
      serve(as_generic(std::move(socket), stream()), peer, options_.session);
    }
    accept();
  });
}

void RouterServer::accept_tcp() {
  tcp_acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
    if (stopped_) return;
    if (ec) {
      log_warning("TCP accept failed: " + ec.message());
    } else if (!room_for_one_more()) {
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(wire::http::kBusyAnswer),
                  ignored);  // tiny; the buffer takes it  // tiny; the socket buffer takes it
    } else {
      // A TCP peer has no credentials: never privileged (access.h).
      SessionLimits limits = options_.session;
      limits.api_key = options_.http_listen->api_key;
      limits.auth_timeout_s = options_.http.request_timeout;
      boost::system::error_code local_ec;
      const auto protocol = socket.local_endpoint(local_ec).protocol();
      serve(as_generic(std::move(socket), protocol), std::nullopt, std::move(limits));
    }
    accept_tcp();
  });
}

void RouterServer::serve(generic_stream::socket socket, std::optional<PeerCredentials> peer,
                         SessionLimits limits) {
  const std::string api_key = limits.api_key;
  auto session = std::make_shared<ClientSession>(
      std::move(socket), router_, std::move(limits), peer,
      [this](ClientSession* s) { sessions_.erase(s); },
      [this, peer, api_key](generic_stream::socket s, std::string bytes) {
        wire::http::ConnectionOptions o;
        o.max_output_bytes = options_.session.max_output_bytes;
        o.peer = peer;
        o.api_key = api_key;
        auto connection = wire::http::Connection::make(
            std::move(s), front_, std::move(o),
            [this](wire::http::Connection* c) { http_connections_.erase(c); });
        http_connections_.emplace(connection.get(), connection);
        connection->start(std::move(bytes));
      });
  sessions_.emplace(session.get(), session);
  session->start();
}

}  // namespace kvtier::router
