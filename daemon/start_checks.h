// What kvtierd's start refuses from its files alone, in one place for the
// start and for --check-config, which docs/service.md tells an operator to
// run before a restart: so the two refuse the same configurations with the
// same message (tests/start_checks_test.cpp holds them to one list).
//
// Checked: the socket group exists; the TCP listener's address, and beyond
// loopback its API key file (present, long enough, private); the model
// folder's config.json, tokenizer and chat template; and whether the KV
// pools fit the machine's memory (L2, and L1 when it is host memory for
// sure: --device cpu). Not here: what needs the service's sandbox
// (service_checks.h), the device, the socket, the weights loaded, or a
// server up; the start finds those.
//
// Thread-safety: reentrant.
#pragma once

#include <sys/types.h>

#include <expected>
#include <optional>
#include <string>

#include "daemon/config.h"
#include "wire/chat_template.h"
#include "wire/http/listener.h"

namespace kvtier::daemon {

// What the checks found that the start goes on with.
struct StartPlan {
  std::optional<gid_t> socket_group;                  // socket_group's gid, when set
  std::optional<wire::http::ListenSpec> http_listen;  // none: the Unix socket only
  wire::ChatTemplate chat_template;                   // the model's
};

// For the start, every file is read. For --check-config, an API key file
// at a credential systemd makes at the service's start (kCredentials,
// service_checks.h) that is not there is taken as given: the check is made
// outside the service, where it cannot be.
enum class StartCheck { kStart, kCheckConfig };

// An error is one line, the message kvtierd logs before it exits 78. The
// start makes these checks after the sandbox's and the socket's (a path it
// cannot bind is said before a model that cannot load), which need the
// socket group first: socket_group_of, which start_checks calls too.
std::expected<StartPlan, std::string> start_checks(const DaemonConfig& config, StartCheck purpose);

// socket_group's gid; none when it is not set.
std::expected<std::optional<gid_t>, std::string> socket_group_of(const DaemonConfig& config);

}  // namespace kvtier::daemon
