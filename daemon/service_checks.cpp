#include "daemon/service_checks.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <tuple>
#include <vector>

#include "tiers/redis_address.h"

namespace kvtier::daemon {

namespace {

// The family http_listen needs: "[::1]:8000" IPv6, anything else (a port,
// an IPv4 address) IPv4.
int listen_family(std::string_view address) {
  return address.find('[') != std::string_view::npos ? AF_INET6 : AF_INET;
}

const char* family_name(int family) { return family == AF_INET6 ? "AF_INET6" : "AF_INET"; }

// Whether this process may open a socket of `family`: systemd's
// RestrictAddressFamilies= refuses the others with EAFNOSUPPORT. Any other
// failure (out of descriptors) is left to the code that opens the real one.
std::expected<void, std::string> family_check(const std::string& setting, const std::string& value,
                                              int family) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    ::close(fd);
    return {};
  }
  if (errno != EAFNOSUPPORT) return {};
  return std::unexpected(setting + " " + value + ": this process may not open " +
                         family_name(family) + " sockets (" + std::strerror(EAFNOSUPPORT) +
                         "); under systemd, kvtierd.service's RestrictAddressFamilies= forbids "
                         "them: install the drop-in kvtierd-tcp.conf (docs/service.md, \"TCP\")");
}

// The first TCP address of the remote setting's list, or nullopt when every
// one is a Unix socket. A list that does not parse is the remote tier's to
// refuse, in its own words (an empty one: no remote tier).
std::optional<tiers::RedisAddress> remote_tcp_address(const std::string& remote) {
  auto addresses = tiers::parse_redis_addresses(remote);
  if (!addresses) return std::nullopt;
  for (const tiers::RedisAddress& a : *addresses)
    if (!a.is_unix()) return a;
  return std::nullopt;
}

}  // namespace

std::expected<void, std::string> credential_check(const std::string& setting,
                                                  const std::string& path, const char* name) {
  if (path.empty() || ::access(path.c_str(), R_OK) == 0) return {};
  const int err = errno;
  const std::string where = setting + " " + path + ": ";
  if (err == EACCES) {
    return std::unexpected(where + "kvtierd (uid " + std::to_string(::geteuid()) +
                           ") may not read it; under systemd the service's dynamic user cannot "
                           "read root's files: pass it with LoadCredential=" +
                           name + ":" + path + " in a drop-in and set " + setting + " = \"" +
                           std::string(kCredentials) + name +
                           "\" (docs/service.md, \"Credentials\")");
  }
  if (err == ENOENT && path.starts_with(kCredentials)) {
    return std::unexpected(where + "no such credential: kvtierd.service needs LoadCredential=" +
                           name + ":SOURCE in a drop-in (docs/service.md, \"Credentials\")");
  }
  return {};  // the reader says what else is wrong, in the same words as now
}

namespace {

// The group of the socket file systemd bound for kvtierd.socket.
std::optional<gid_t> activated_socket_group(int fd) {
  sockaddr_un address{};
  socklen_t size = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return std::nullopt;
  if (address.sun_path[0] == '\0') return std::nullopt;  // abstract: no file
  struct stat st {};
  if (::stat(address.sun_path, &st) != 0) return std::nullopt;
  return st.st_gid;
}

bool in_group(gid_t gid) {
  if (::getegid() == gid) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i)
    if (groups[static_cast<std::size_t>(i)] == gid) return true;
  return false;
}

std::expected<void, std::string> socket_group_check(const DaemonConfig& c, std::optional<gid_t> gid,
                                                    std::optional<int> activated_fd) {
  if (!gid) return {};
  const std::string where = "socket_group " + c.socket_group + ": ";
  if (activated_fd) {
    const auto has = activated_socket_group(*activated_fd);
    if (!has || *has == *gid) return {};
    return std::unexpected(where + "systemd made the socket (kvtierd.socket) with group " +
                           std::to_string(*has) +
                           ", and kvtierd cannot change a socket it did not make: set "
                           "SocketGroup=" +
                           c.socket_group +
                           " in a kvtierd.socket drop-in (kvtierd-group.conf, docs/service.md, "
                           "\"Clients in a group\")");
  }
  if (::geteuid() == 0 || in_group(*gid)) return {};
  return std::unexpected(where + "kvtierd (uid " + std::to_string(::geteuid()) +
                         ") is not in the group, so it cannot give its socket to it: under "
                         "systemd, use kvtierd.socket with SocketGroup=" +
                         c.socket_group +
                         " (kvtierd-group.conf, docs/service.md, \"Clients in a group\"); run by "
                         "hand, add the user to the group");
}

// The NVIDIA driver is loaded (it made /proc/driver/nvidia) but its device
// nodes are not visible: PrivateDevices=true gives the service a /dev of
// its own without them. Empty when the GPU is visible or there is none.
std::string gpu_hidden() {
#if defined(KVTIER_HAVE_CUDA)
  std::error_code ec;
  if (std::filesystem::exists("/proc/driver/nvidia", ec) &&
      !std::filesystem::exists("/dev/nvidiactl", ec)) {
    return "the NVIDIA driver is loaded but /dev/nvidiactl is not visible to kvtierd: under "
           "systemd, kvtierd.service's PrivateDevices=true hides the GPU: install the drop-in "
           "kvtierd-gpu.conf (docs/service.md, \"GPU\")";
  }
#endif
  return {};
}

}  // namespace

std::expected<ServiceChecks, std::string> service_checks(const DaemonConfig& c,
                                                         std::optional<gid_t> socket_gid,
                                                         std::optional<int> activated_fd) {
  ServiceChecks out;
  if (!c.http_listen.empty()) {
    if (auto ok = family_check("http_listen", c.http_listen, listen_family(c.http_listen)); !ok)
      return std::unexpected(ok.error());
  }
  if (const auto tcp = remote_tcp_address(c.scheduler.cache.remote)) {
    const int family = tcp->host.find(':') != std::string::npos ? AF_INET6 : AF_INET;
    if (auto ok = family_check("remote", tcp->to_string(), family); !ok)
      return std::unexpected(ok.error());
  }
  for (auto [setting, path, name] :
       {std::tuple{"http_api_key_file", &c.http_api_key_file, "api-key"},
        std::tuple{"remote_password_file", &c.scheduler.cache.remote_password_file,
                   "redis-password"},
        std::tuple{"remote_secret", &c.scheduler.cache.remote_secret, "remote-secret"}}) {
    if (auto ok = credential_check(setting, *path, name); !ok) return std::unexpected(ok.error());
  }
  if (auto ok = socket_group_check(c, socket_gid, activated_fd); !ok)
    return std::unexpected(ok.error());
  if (const std::string hidden = gpu_hidden(); !hidden.empty()) {
    if (c.device == "cuda") return std::unexpected("device cuda: " + hidden);
    if (c.device == "auto") out.warnings.push_back("device auto runs on the CPU: " + hidden);
  }
  return out;
}

}  // namespace kvtier::daemon
