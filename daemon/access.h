// Who may talk to kvtierd, and who may change it.
//
// The socket's file mode (0660, optionally with a chosen group) decides who
// may connect at all. Once connected, any client may generate and read
// state, but the calls that change or stop the daemon for everyone —
// `shutdown` now, `cache.flush`, `cache.pin` and `config.set` as they land —
// are privileged: only the daemon's own uid and root may make them, unless
// the daemon runs with --allow-any-uid (for a group of trusted users).
//
// The kernel reports each peer's credentials (SO_PEERCRED) as they were when
// it connected; a client cannot forge them.
#pragma once

#include <sys/types.h>

#include <expected>
#include <optional>
#include <string>

namespace kvtier::daemon {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// SO_PEERCRED of a connected Unix socket; nullopt if the kernel refuses
// (not a Unix socket, or already closed).
std::optional<PeerCredentials> peer_credentials(int fd);

// "pid 123 uid 1000 gid 1000", for the log.
std::string to_string(const PeerCredentials& peer);

// Whether a peer with `peer_uid` may make a privileged call on a daemon
// running as `daemon_uid`. Pure, so it is tested with uids the test cannot
// take on.
bool privileged_call_allowed(uid_t peer_uid, uid_t daemon_uid, bool allow_any_uid);

// The gid of a group name, for --socket-group; the error names the group.
std::expected<gid_t, std::string> group_id(const std::string& name);

}  // namespace kvtier::daemon
