#include "wire/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "wire/log.h"

namespace kvtier::wire {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using stream = asio::local::stream_protocol;

namespace {

enum class PathState { kFree, kStaleSocket };

// What lives at `path`, or why a daemon cannot bind there.
std::expected<PathState, std::string> path_state(const std::string& path) {
  if (path.empty()) return std::unexpected(std::string("the socket path is empty"));
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return std::unexpected("socket path " + path + " is " + std::to_string(path.size()) +
                           " bytes; a Unix socket path has at most " +
                           std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                           " (choose a shorter --socket)");
  }
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return PathState::kFree;
  if (!fs::is_socket(st)) {
    return std::unexpected(path + " exists and is not a socket; refusing to replace it");
  }
  // Someone answering means another daemon serves there; a refused
  // connection leaves a stale file behind a daemon that died.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::unexpected("cannot probe " + path + ": " + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  if (live) return std::unexpected("another daemon is listening on " + path);
  return PathState::kStaleSocket;
}

}  // namespace

std::expected<void, std::string> socket_path_check(const std::string& path) {
  auto state = path_state(path);
  if (!state) return std::unexpected(state.error());
  return {};
}

std::expected<void, std::string> unix_socket_listen(stream::acceptor& acceptor,
                                                    const std::string& path,
                                                    std::optional<gid_t> group) {
  // Asked again: the path may have changed since main() asked.
  auto state = path_state(path);
  if (!state) return std::unexpected(state.error());
  if (*state == PathState::kStaleSocket) {
    log_info("removing stale socket " + path);
    std::error_code fs_ec;
    fs::remove(path, fs_ec);
    if (fs_ec)
      return std::unexpected("cannot remove stale socket " + path + ": " + fs_ec.message());
  }
  boost::system::error_code ec;
  acceptor.open(stream(), ec);
  if (!ec) acceptor.bind(stream::endpoint(path), ec);
  if (ec) return std::unexpected("cannot bind " + path + ": " + ec.message());
  // Bound: from here on a failure removes the file it made.
  const auto failed = [&](std::string why) {
    std::error_code ignored;
    fs::remove(path, ignored);
    return std::unexpected(std::move(why));
  };
  // Mode and group before listen(): no client can connect through a mode
  // wider than the one asked for, even for a moment.
  // Owner and group only: a client can make the daemon burn CPU and memory.
  if (::chmod(path.c_str(), 0660) != 0)
    return failed("cannot chmod " + path + ": " + std::generic_category().message(errno));
  if (group && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    return failed("cannot give " + path + " to group " + std::to_string(*group) + ": " +
                  std::generic_category().message(errno));
  }
  acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return failed("cannot listen on " + path + ": " + ec.message());
  return {};
}

}  // namespace kvtier::wire
