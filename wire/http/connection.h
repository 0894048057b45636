// One HTTP/1.1 client connection: on the daemon's Unix socket, where the
// server tells it from JSON-RPC by its first byte (an HTTP request starts
// with a method's upper-case letters, a JSON-RPC line with '{'), or on the
// optional TCP listener (http_listen); or on kvtier-router's. Boost.Beast
// parses each request and writes each answer; a Service (exchange.h) makes
// the answers: kvtierd's routes (daemon/http/routes.h) or the router's front door.
//
// Limits, so that no client can hold the daemon's memory or a connection
// slot for nothing:
//   * a request's header block is at most kMaxHeaderBytes (431 beyond), its
//     body at most max_line_bytes, the same limit as a JSON-RPC line (413);
//     a request that does not parse gets 400; each then closes the
//     connection, as the stream can no longer be trusted;
//   * a request must arrive whole within http_timeout of its first byte
//     (408, closed: slow-loris), and an idle keep-alive connection is closed
//     after as long;
//   * answers queued for a client that does not read them are bounded by
//     max_output_bytes, as on JSON-RPC: past it the client is dropped.
//
// Keep-alive: requests are answered one at a time, in order. While an
// answer is being made (a generation may take minutes) the connection keeps
// reading, so a client that goes away is noticed at once: its generations
// are cancelled, which gives their KV back, as on JSON-RPC. Bytes of a next
// (pipelined) request are kept, up to a bound, until the answer is done.
//
// With an API key (options.api_key, required on a TCP listener beyond
// loopback), every request but GET /health and the page's files
// (page.h, open_without_key) must carry "Authorization: Bearer <key>";
// others get 401.
//
// Thread-safety: lives on its io thread; Exchange::post() from any thread.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wire/access.h"
#include "wire/http/exchange.h"

namespace kvtier::wire::http {

namespace asio = boost::asio;

inline constexpr std::size_t kMaxHeaderBytes = 16 << 10;

// What a TCP connection refused by max_connections is sent before it is
// closed (kvtierd's and kvtier-router's listeners alike).
inline constexpr std::string_view kBusyAnswer =
    "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

// Whether a connection whose first byte is `first` speaks HTTP.
constexpr bool starts_http(char first) { return first >= 'A' && first <= 'Z'; }

struct ConnectionOptions {
  std::size_t max_output_bytes = 8 << 20;
  std::optional<PeerCredentials> peer;  // Unix socket peers; nullopt on TCP
  std::string api_key;                  // empty: no Authorization needed
};

class Connection {
 public:
  // Called once when the connection has closed, on the io thread.
  using ClosedHandler = std::function<void(Connection*)>;

  // `service` outlives the connection.
  static std::shared_ptr<Connection> make(asio::local::stream_protocol::socket socket,
                                          Service& service, ConnectionOptions options,
                                          ClosedHandler on_closed);
  static std::shared_ptr<Connection> make(asio::ip::tcp::socket socket, Service& service,
                                          ConnectionOptions options, ClosedHandler on_closed);
  // A connection a Session handed over (Unix socket or TCP).
  static std::shared_ptr<Connection> make(asio::generic::stream_protocol::socket socket,
                                          Service& service, ConnectionOptions options,
                                          ClosedHandler on_closed);
  virtual ~Connection() = default;

  // Starts with the bytes already read from the socket (the server's look
  // at the first ones). REQUIRES: owned by the shared_ptr make() returned.
  virtual void start(std::string already_read) = 0;
  // Stops reading, flushes what is queued (at most a second) and closes.
  // Idempotent.
  virtual void stop() = 0;
};

}  // namespace kvtier::wire::http
