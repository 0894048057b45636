// What a session may ask of the daemon as a whole, beyond the engine: its
// configuration, changes to it, and stopping. The Server implements it;
// sessions hold a reference and never see the Server itself.
//
// Thread-safety: every call on the io thread; callbacks come back on it.
#pragma once

#include <expected>
#include <functional>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace kvtier::daemon {

class DaemonControl {
 public:
  // Computes the next configuration from the current one, or refuses.
  using ConfigChangeFn =
      std::function<std::expected<DaemonConfig, std::string>(const DaemonConfig&)>;
  // The settings that changed (possibly none), or why nothing changed.
  using ConfigDoneFn =
      std::function<void(const std::expected<std::vector<SettingChange>, std::string>&)>;

  virtual ~DaemonControl() = default;

  // The configuration in force now.
  virtual const DaemonConfig& config() const = 0;

  // Applies `change` to the configuration in force once earlier changes are
  // done (changes never overlap, so none is computed from a stale base), the
  // scheduler's part on the engine thread. All or nothing. `done` is dropped
  // uncalled if the daemon stops first.
  virtual void config_update(ConfigChangeFn change, ConfigDoneFn done) = 0;

  // Connections open now.
  virtual int connections() const = 0;

  // Whether the daemon is stopping (draining, then cancelling): new
  // generations are refused.
  virtual bool stopping() const = 0;

  // Stops the daemon as SIGTERM does (drain, then cancel; see server.h).
  virtual void shutdown() = 0;
};

}  // namespace kvtier::daemon
