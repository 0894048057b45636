// What the service's sandbox makes impossible, found before the model loads
// and said with the unit setting that causes it.
//
// kvtierd.service (daemon/systemd) runs with a dynamic user, Unix sockets
// only and no devices; the drop-ins beside it open what each way of running
// needs (docs/service.md). A configuration that asks for more than the
// sandbox allows would otherwise fail late and obscurely: a TCP listener
// refused with "Address family not supported", a Redis on TCP that is only
// a warning, a GPU that `device = auto` silently replaces with the CPU, an
// API key file that the dynamic user cannot read, a socket group the daemon
// is not in. Each check here tries what the daemon will do (open a socket
// of that family, read the file, look for the device node) rather than
// guess whether systemd is around, so it holds under any sandbox; the
// message names the unit setting as the likely cause.
//
// Thread-safety: call from main before anything else runs.
#pragma once

#include <sys/types.h>

#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.h"

namespace kvtier::daemon {

// Where the credentials of LoadCredential= appear for kvtierd.service.
inline constexpr std::string_view kCredentials = "/run/credentials/kvtierd.service/";

// A file `setting` names that this process may not read: the dynamic user
// of kvtierd.service cannot read root's 0600 files, and LoadCredential= is
// how systemd hands them over (`name`, the credential's). An error says
// how, for a file it cannot read or a credential that is not there; any
// other trouble is the reader's to say.
std::expected<void, std::string> credential_check(const std::string& setting,
                                                  const std::string& path, const char* name);

struct ServiceChecks {
  std::vector<std::string> warnings;  // for the log: the daemon still runs
};

// Checks `config` against what this process may do. `socket_gid` is
// socket_group's gid when it is set; `activated_fd` the socket systemd
// passed (socket activation), when there is one. An error is a
// configuration the daemon cannot run with (exit 78), its text naming the
// setting, the cause and the fix.
std::expected<ServiceChecks, std::string> service_checks(const DaemonConfig& config,
                                                         std::optional<gid_t> socket_gid,
                                                         std::optional<int> activated_fd);

}  // namespace kvtier::daemon
