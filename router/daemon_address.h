// Where a daemon listens, as --daemon gives it: the path of its Unix
// socket, or tcp://HOST:PORT, the TCP listener of a kvtierd on another
// machine (its http_listen, which serves JSON-RPC and HTTP alike). On TCP
// the router gives the daemon's API key (--daemon-api-key-file): as an
// `auth` call first on each JSON-RPC connection, as a Bearer token on each
// HTTP request.
//
// HOST is numeric (10.0.0.2, [fd00::2]) or localhost: the router resolves
// no names, so a fleet's addresses never change under it.
#pragma once

#include <boost/asio.hpp>
#include <expected>
#include <string>

namespace kvtier::router {

struct DaemonAddress {
  std::string text;  // as given: for logs, `fleet` and the metrics' labels
  boost::asio::generic::stream_protocol::endpoint endpoint;
  bool tcp = false;
  std::string api_key;  // TCP only; empty: the daemon asks none

  // The JSON-RPC line a new connection sends first: `auth` with the key
  // (id "auth"), or empty when none is needed.
  std::string auth_line() const;
};

// `text` as an address, with `api_key` for TCP ones; an error naming it
// otherwise.
std::expected<DaemonAddress, std::string> daemon_address_parse(const std::string& text,
                                                               const std::string& api_key);

}  // namespace kvtier::router
