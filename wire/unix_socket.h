// The Unix socket kvtierd and kvtier-router each listen on: whether a path
// can take one, and listening there.
#pragma once

#include <sys/types.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <expected>
#include <optional>
#include <string>

namespace kvtier::wire {

// Whether a daemon could bind a Unix socket at `path`: the path fits a
// socket address (sun_path: 107 bytes and a NUL), and nothing lives there
// but, at most, a stale socket (listen() replaces it). Refused, with the
// path and the reason: a path too long, a live socket (another daemon), a
// file of another kind. main() asks before loading the model, so a daemon
// that could not serve says so at once instead of after the load.
std::expected<void, std::string> socket_path_check(const std::string& path);

// Listens on a Unix socket at `path` (kvtierd's and kvtier-router's): a
// stale socket file is replaced, a live one or a file of another kind
// refused (socket_path_check); the socket gets mode 0660, and `group` when
// given, before listen(), so no client connects through a wider mode even
// for a moment. A failure after the bind removes the file again. Errors
// name the path and the reason.
std::expected<void, std::string> unix_socket_listen(
    boost::asio::local::stream_protocol::acceptor& acceptor, const std::string& path,
    std::optional<gid_t> group);

}  // namespace kvtier::wire
