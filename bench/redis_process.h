// A redis-server child process for the fleet runs (bench/soak --fleet): a
// cache for the remote tier, as docs/fleet.md configures one (persistence
// off, allkeys-lru under a memory limit), on a Unix socket in a fresh /tmp
// folder that goes with it. Stopped (SIGTERM, then SIGKILL) when the object
// goes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <expected>
#include <memory>
#include <string>

#include "util/child_process.h"

namespace kvtier::bench {

class RedisProcess {
 public:
  // Starts `binary` (redis-server) holding at most `maxmemory_bytes`, and
  // waits until it answers a PING on its socket (at most `ready_timeout_s`).
  static std::expected<std::unique_ptr<RedisProcess>, std::string> start(
      const std::string& binary, std::size_t maxmemory_bytes, double ready_timeout_s = 10);
  ~RedisProcess();
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  // The path to give kvtierd's `remote` setting.
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return child_.pid(); }

 private:
  RedisProcess() = default;

  util::ChildProcess child_;
  std::string dir_, socket_;
};

// redis-server on PATH or in /usr/bin; empty when there is none.
std::string find_redis_server();

}  // namespace kvtier::bench
