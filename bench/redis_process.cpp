#include "bench/redis_process.h"

#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "util/child_process.h"

namespace kvtier::bench {

namespace asio = boost::asio;

namespace {

using Clock = std::chrono::steady_clock;
using stream = asio::local::stream_protocol;

// Whether a server answers PING with +PONG on `socket`.
bool answers_ping(const std::string& socket) {
  asio::io_context io;
  stream::socket s(io);
  boost::system::error_code ec;
  s.connect(stream::endpoint(socket), ec);
  if (ec) return false;
  asio::write(s, asio::buffer(std::string_view("PING\r\n")), ec);
  if (ec) return false;
  std::string reply;
  asio::read_until(s, asio::dynamic_buffer(reply), "\r\n", ec);
  return !ec && reply.rfind("+PONG", 0) == 0;
}

}  // namespace

std::string find_redis_server() {
  std::string path = "/usr/bin";
  if (const char* env = std::getenv("PATH")) path = std::string(env) + ":" + path;
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/redis-server";
    if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

std::expected<std::unique_ptr<RedisProcess>, std::string> RedisProcess::start(
    const std::string& binary, std::size_t maxmemory_bytes, double ready_timeout_s) {
  if (binary.empty() || ::access(binary.c_str(), X_OK) != 0)
    return std::unexpected("redis-server not found (scripts/install-deps.sh installs it)");
  std::unique_ptr<RedisProcess> r(new RedisProcess());
  char dir_template[] = "/tmp/kvtier-redis-XXXXXX";
  if (!::mkdtemp(dir_template)) return std::unexpected(std::string("mkdtemp failed"));
  r->dir_ = dir_template;
  r->socket_ = r->dir_ + "/redis.sock";
  std::vector<std::string> args = {binary,
                                   "--port",
                                   "0",
                                   "--unixsocket",
                                   r->socket_,
                                   "--unixsocketperm",
                                   "700",
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "no",
                                   "--maxmemory",
                                   std::to_string(maxmemory_bytes),
                                   "--maxmemory-policy",
                                   "allkeys-lru",
                                   "--dir",
                                   r->dir_,
                                   "--logfile",
                                   r->dir_ + "/redis.log"};
  auto child = util::spawn_child(args);
  if (!child) return std::unexpected(child.error());
  r->child_ = std::move(*child);
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(ready_timeout_s * 1000));
  while (Clock::now() < deadline) {
    if (const auto status = r->child_.wait(std::chrono::milliseconds(0))) {
      return std::unexpected("redis-server exited at start-up (status " + std::to_string(*status) +
                             ")");
    }
    if (answers_ping(r->socket_)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::unexpected("redis-server did not answer a PING in time on " + r->socket_);
}

RedisProcess::~RedisProcess() {
  (void)child_.stop(std::chrono::seconds(5));  // before its folder goes
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace kvtier::bench
