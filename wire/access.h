// Who may talk to kvtierd, and who may change it.
//
// The socket's file mode (0660, optionally with a chosen group) decides who
// may connect at all. Once connected, any client may generate and read
// state, but the calls that change or stop the daemon for everyone —
// `shutdown`, `cache.flush`, `cache.pin`, `cache.unpin` and `config.set` —
// are privileged: only the daemon's own uid and root may make them, unless
// the daemon runs with --allow-any-uid (for a group of trusted users). A
// request is cancelled only by its own connection, its own uid or a
// privileged caller (cancel_allowed).
//
// The kernel reports each peer's credentials (SO_PEERCRED) as they were when
// it connected; a client cannot forge them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::wire {

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

// Who submitted a request: its connection (a number the daemon gives each)
// and, when the kernel told, its uid.
struct RequestOwner {
  std::uint64_t connection = 0;
  std::optional<uid_t> uid;
};

// A number for a new connection, unique over the daemon's life, JSON-RPC and
// HTTP alike: RequestOwner::connection. Call on the io thread only.
std::uint64_t next_connection_number();

// Whether `caller` may cancel a request `owner` submitted: from the same
// connection, as the same uid, or as a privileged caller
// (privileged_call_allowed). Request ids are small sequential numbers that
// anyone can guess, so the id alone proves nothing. A peer whose uid the
// kernel did not tell matches no uid.
bool cancel_allowed(const RequestOwner& owner, const RequestOwner& caller, bool caller_privileged);

// Whether `given` is the API key `key`, in time that does not depend on
// where they differ (HTTP's Bearer token, JSON-RPC's `auth`).
bool same_secret(std::string_view given, std::string_view key);

// The gid of a group name, for --socket-group; the error names the group.
std::expected<gid_t, std::string> group_id(const std::string& name);

}  // namespace kvtier::wire
