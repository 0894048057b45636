#include "wire/access.h"

#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kvtier::wire {

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    return std::nullopt;
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

std::string to_string(const PeerCredentials& peer) {
  return "pid " + std::to_string(peer.pid) + " uid " + std::to_string(peer.uid) + " gid " +
         std::to_string(peer.gid);
}

std::uint64_t next_connection_number() {
  static std::uint64_t next = 1;
  return next++;
}

bool privileged_call_allowed(uid_t peer_uid, uid_t daemon_uid, bool allow_any_uid) {
  return allow_any_uid || peer_uid == 0 || peer_uid == daemon_uid;
}

bool cancel_allowed(const RequestOwner& owner, const RequestOwner& caller, bool caller_privileged) {
  if (caller_privileged || caller.connection == owner.connection) return true;
  return owner.uid && caller.uid && *owner.uid == *caller.uid;
}

std::expected<gid_t, std::string> group_id(const std::string& name) {
  if (name.empty()) return std::unexpected(std::string("empty group name"));
  // getgrnam_r: the reentrant form, with a buffer grown until the entry fits
  // (large groups list many members).
  std::vector<char> buf(4096);
  for (;;) {
    group gr{};
    group* found = nullptr;
    const int err = ::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found);
    if (err == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    if (err != 0) {
      return std::unexpected("cannot look up group '" + name + "': " + std::strerror(err));
    }
    if (!found) return std::unexpected("no such group '" + name + "'");
    return found->gr_gid;
  }
}

bool same_secret(std::string_view given, std::string_view key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ (i < key.size() ? key[i] : 0));
  return diff == 0;
}

}  // namespace kvtier::wire
