// Where the remote tier's Redis servers are: the `remote` setting, one
// address or a comma-separated list of a cluster's seed nodes. Each is one
// of
//
//   redis://HOST[:PORT][/0]   HOST[:PORT]   [IPv6]:PORT
//   unix:///PATH/redis.sock   /PATH/redis.sock
//
// with port 6379 when none is given. Refused with the reason: credentials
// in the URL (they would show in `ps`, logs and config.get: the password
// comes from the config file or a file it names), TLS (`rediss://`, not
// built in), a database other than 0 (Redis Cluster has only 0), query
// strings, an empty list.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::tiers {

struct RedisAddress {
  std::string host;  // empty for a Unix socket
  int port = 6379;
  std::string unix_path;  // empty for TCP

  static RedisAddress tcp(std::string host, int port = 6379) {
    RedisAddress a;
    a.host = std::move(host);
    a.port = port;
    return a;
  }
  static RedisAddress unix_socket(std::string path) {
    RedisAddress a;
    a.unix_path = std::move(path);
    return a;
  }

  bool is_unix() const { return !unix_path.empty(); }
  // "host:port", "[v6]:port" or the socket path: for logs and stats.
  std::string to_string() const;
  bool operator==(const RedisAddress&) const = default;
};

std::expected<std::vector<RedisAddress>, std::string> parse_redis_addresses(std::string_view text);

}  // namespace kvtier::tiers
