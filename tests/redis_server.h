// A real redis-server for a test: started on a Unix socket in a temp dir
// (and a loopback TCP port when asked), persistence off, stopped and its
// files removed when the object goes. Tests that need one skip with
// missing()'s reason on a machine without it (scripts/install-deps.sh
// installs it).
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tiers/redis_connection.h"
#include "util/child_process.h"

// At the top of a test that needs a server: skips it with the reason on a
// machine without one.
#define SKIP_WITHOUT_REDIS() \
  if (auto why = ::kvtier::test_util::RedisServer::missing()) GTEST_SKIP() << *why

namespace kvtier::test_util {

class RedisServer {
 public:
  // Why no server can be started here, or nullopt.
  static std::optional<std::string> missing() {
    if (binary().empty())
      return "redis-server is not installed (scripts/install-deps.sh installs it)";
    return std::nullopt;
  }

  // With tcp, it also listens on a free loopback port; with a password, it
  // requires it (requirepass); `extra` are more redis-server arguments.
  explicit RedisServer(bool tcp = false, std::string password = {},
                       std::vector<std::string> extra = {})
      : tcp_(tcp), password_(std::move(password)), extra_(std::move(extra)) {
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Whether it answered a PING after starting; the log says why not.
  bool ready() const { return ready_; }
  std::string log() const { return read_file(dir_.path() / "redis.log") + start_error_; }
  tiers::RedisAddress unix_address() const {
    return tiers::RedisAddress::unix_socket(socket_path());
  }
  tiers::RedisAddress tcp_address() const { return tiers::RedisAddress::tcp("127.0.0.1", port_); }
  std::string socket_path() const { return (dir_.path() / "redis.sock").string(); }

  // Stops it (SIGKILL: as a crash would) and starts it again on the same
  // socket and port, empty.
  void stop() {
    (void)child_.stop(std::chrono::milliseconds(0));
    child_ = util::ChildProcess();
    ready_ = false;
  }
  void start() {
    if (binary().empty() || child_.pid() > 0) return;
    if (tcp_ && port_ == 0) port_ = free_port();
    std::vector<std::string> args = {binary(),
                                     "--port",
                                     std::to_string(tcp_ ? port_ : 0),
                                     "--bind",
                                     "127.0.0.1",
                                     "--unixsocket",
                                     socket_path(),
                                     "--unixsocketperm",
                                     "700",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.path().string(),
                                     "--logfile",
                                     (dir_.path() / "redis.log").string()};
    if (!password_.empty()) args.insert(args.end(), {"--requirepass", password_});
    args.insert(args.end(), extra_.begin(), extra_.end());
    auto child = util::spawn_child(args);
    start_error_ = child ? "" : child.error();  // not ready(); log() says why
    if (!child) return;
    child_ = std::move(*child);
    // Ready once it answers; it starts in milliseconds, so ten seconds
    // means it is not going to.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!ready_ && std::chrono::steady_clock::now() < deadline) {
      auto c = tiers::RedisConnection::connect(unix_address(), std::chrono::milliseconds(500),
                                               password_);
      if (c) {
        const tiers::RedisConnection::Command ping = {"PING"};
        auto r = (*c)->round(std::span(&ping, 1), std::chrono::milliseconds(500));
        ready_ = r && !(*r)[0].is_error();
      }
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  pid_t pid() const { return child_.pid(); }
  int port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

  static int free_port() { return free_tcp_port(); }
  // A command on the server, as an operator would send it.
  tiers::RedisReply command(const tiers::RedisConnection::Command& c) const {
    auto connection =
        tiers::RedisConnection::connect(unix_address(), std::chrono::milliseconds(2000), password_)
            .value();
    return connection->round(std::span(&c, 1), std::chrono::milliseconds(2000)).value()[0];
  }

 private:
  static std::string binary() {
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
      if (::access(p, X_OK) == 0) return p;
    return "";
  }
  bool tcp_;
  std::string password_;
  std::vector<std::string> extra_;
  TempDir dir_;
  util::ChildProcess child_;
  int port_ = 0;
  bool ready_ = false;
  std::string start_error_;  // why redis-server could not be run
};

}  // namespace kvtier::test_util
