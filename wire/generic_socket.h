// A connected Unix or TCP socket as Asio's generic stream socket, the one
// kind a Session and an HTTP connection take, so that both front doors
// serve both transports with one code path.
//
// On failure (the descriptor could not be moved) the socket comes back
// closed and the connection ends at its first read.
#pragma once

#include <unistd.h>

#include <boost/asio.hpp>

namespace kvtier::wire {

template <class Protocol, class Executor>
boost::asio::generic::stream_protocol::socket as_generic(
    boost::asio::basic_stream_socket<Protocol, Executor>&& socket, const Protocol& protocol) {
  boost::asio::generic::stream_protocol::socket out(socket.get_executor());
  boost::system::error_code ec;
  const auto fd = socket.release(ec);
  if (ec) return out;
  out.assign(boost::asio::generic::stream_protocol(protocol), fd, ec);
  if (ec) ::close(fd);
  return out;
}

}  // namespace kvtier::wire
