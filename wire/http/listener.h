// The optional TCP listener (the http_listen setting), for the HTTP API and
// JSON-RPC alike (told by the first byte, as on the Unix socket), checked
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
// <key>" on every HTTP request but GET /health, and as an `auth` call before
// any other on a JSON-RPC connection. With a key file on loopback, the
// key is required there too. The key file is read as the remote tier's
// secrets are (util/private_file.h): a regular file no other user may read,
// its trailing newline dropped, 16 to 4096 bytes.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <expected>
#include <optional>
#include <string>

namespace kvtier::wire::http {

struct ListenSpec {
  boost::asio::ip::tcp::endpoint endpoint;
  std::string api_key;  // empty: none asked
};

// nullopt when `listen` (http_listen) is empty; an error naming the
// setting otherwise. `api_key_file` is http_api_key_file. kvtier-router
// takes its --http-listen and --http-api-key-file with the same rules.
// Without `read_key` a named key file is taken as given and not read (the
// spec's api_key stays empty): for a check made where the file cannot be,
// a credential systemd makes at the service's start (daemon/start_checks.h).
std::expected<std::optional<ListenSpec>, std::string> listen_spec(const std::string& listen,
                                                                  const std::string& api_key_file,
                                                                  bool read_key = true);

// HOST:PORT (127.0.0.1:8000, [::1]:8000; "localhost" is 127.0.0.1; numeric
// addresses only, no name lookup) or a port alone (loopback); nullopt when
// `text` is neither.
std::optional<boost::asio::ip::tcp::endpoint> tcp_endpoint_parse(const std::string& text);

// The listener as the start-up log names it: "127.0.0.1:8000 (API key
// required); the page at http://127.0.0.1:8000/" (for an unspecified
// address, the page at this machine's address on that port).
std::string describe(const ListenSpec& spec);

// Opens, binds and listens `acceptor` on `endpoint` (address reuse on, as
// a restarted server needs); the error names http_listen and the address.
std::expected<void, std::string> tcp_listen(boost::asio::ip::tcp::acceptor& acceptor,
                                            const boost::asio::ip::tcp::endpoint& endpoint);

}  // namespace kvtier::wire::http
