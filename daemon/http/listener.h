// The HTTP API's optional TCP listener (the http_listen setting), checked
// before the model loads:
//
//   http_listen = "8000"            loopback, 127.0.0.1:8000
//   http_listen = "127.0.0.1:8000"  the same
//   http_listen = "[::1]:8000"      IPv6 loopback
//   http_listen = "0.0.0.0:8000"    every interface: needs http_api_key_file
//
// Loopback is reachable from this machine only, like the Unix socket; beyond
// it anyone on the network is, so an API key is required then (the daemon
// refuses to start without one), and checked as "Authorization: Bearer
// <key>" on every request but GET /health. With a key file on loopback, the
// key is required there too. The key file is read as the remote tier's
// secrets are (util/private_file.h): a regular file no other user may read,
// its trailing newline dropped, 16 to 4096 bytes.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <expected>
#include <optional>
#include <string>

#include "daemon/config.h"

namespace kvtier::daemon::http {

struct ListenSpec {
  boost::asio::ip::tcp::endpoint endpoint;
  std::string api_key;  // empty: none asked
};

// nullopt when http_listen is empty; an error naming the setting otherwise.
std::expected<std::optional<ListenSpec>, std::string> listen_spec(const DaemonConfig& config);

}  // namespace kvtier::daemon::http
