// Where kvtierd and kvtier-router look when not told: the socket and the
// bundled model. Shared so the two programs agree.
#pragma once

#include <expected>
#include <string>
#include <string_view>

namespace kvtier::wire {

// $XDG_RUNTIME_DIR/kvtier/<file> for a user session, else the system path
// systemd's RuntimeDirectory=kvtier provides (/run/kvtier/<file>).
std::string default_socket_path(std::string_view file = "kvtierd.sock");

// The bundled model: installed next to the binary (`cmake --install` puts it
// in PREFIX/share/kvtier/models), else the source tree the binary was built
// from.
std::string default_model_dir();

// The socket's folder, made if missing and writable, or why not: asked
// before anything slow, so that a program that cannot bind says so at once.
// `default_path`: the program's default socket, for a hint when that is the
// one that failed.
std::expected<void, std::string> socket_dir_prepare(const std::string& socket_path,
                                                    const std::string& default_path);

}  // namespace kvtier::wire
