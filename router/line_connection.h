// A newline-delimited connection to a kvtierd (its Unix socket, or its TCP
// listener: DaemonAddress), asynchronous:
// lines out through a bounded WriteQueue, lines in through a LineFramer, each
// handed to on_line in order; on_closed is called once, with the reason,
// when the connection fails or the daemon closes it (never after close()).
// On TCP with a key, the address's `auth` line goes first; its answer (id
// "auth") comes to on_line as any other.
//
// Lifetime: held by a shared_ptr; pending handlers keep it alive, and
// close() drops the callbacks, so an owner that goes away calls close()
// first.
//
// Thread-safety: on its io_context's thread only.
#pragma once

#include <array>
#include <boost/asio.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "router/daemon_address.h"
#include "wire/line_framer.h"
#include "wire/write_queue.h"

namespace kvtier::router {

namespace asio = boost::asio;

class LineConnection : public std::enable_shared_from_this<LineConnection> {
 public:
  using OnLine = std::function<void(std::string line)>;
  using OnClosed = std::function<void(std::string why)>;
  using OnConnected = std::function<void()>;

  // Lines longer than this from a daemon (a result holding 20 logprobs per
  // token of a long generation is the largest) close the connection.
  static constexpr std::size_t kMaxLineBytes = 64 << 20;

  LineConnection(asio::io_context& io, DaemonAddress address, std::size_t max_output_bytes);

  // Connects, then calls on_connected and starts reading; on failure
  // on_closed says why.
  void start(OnConnected on_connected, OnLine on_line, OnClosed on_closed);

  // Queues `line` (ending in '\n'); lines sent before the connection is
  // made go once it is. A daemon that does not read closes the connection
  // (on_closed) once max_output_bytes are queued.
  void send(std::string line);

  // Closes now; no callback is called after this.
  void close();

  bool open() const { return open_; }

 private:
  void read();
  void fail(const std::string& why);

  asio::generic::stream_protocol::socket socket_;
  DaemonAddress address_;
  wire::LineFramer framer_{kMaxLineBytes};
  wire::WriteQueue<asio::generic::stream_protocol::socket> out_;
  std::array<char, 16384> read_buf_{};
  std::vector<std::string> before_connected_;
  OnLine on_line_;
  OnClosed on_closed_;
  bool open_ = false;
  bool closed_ = false;
};

}  // namespace kvtier::router
