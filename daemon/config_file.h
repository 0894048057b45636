// kvtierd's --config file, read with toml++: one top-level key per setting
// of the settings table (config.h), named as its flag without the dashes
// (`max-batch-size = 8`) or as config.get names it (`max_batch_size = 8`).
//
// Values have TOML's types: true/false, integers, numbers of seconds,
// strings for text, choices and paths; a size is an integer of bytes or a
// string with a suffix in powers of 1024 ("256M", "4GiB"), as on the
// command line. Each value is checked by setting_store(), as a flag's and
// config.set's are, so all three accept the same values.
//
// Refused, with the file, the line and the key in the message
// ("/etc/kvtier/kvtierd.toml:12: max-batch-size: must be an integer in
// [1, 1048576], got 0"): a file that is not a regular file of at most
// kMaxConfigBytes, text that is not TOML, a key that is no setting, one
// setting under two spellings, a table (settings are top-level keys), and a
// value of the wrong type or out of range.
//
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace kvtier::daemon {

// The largest config file read: settings, not data (and /dev/zero or a
// FIFO named by mistake must not hang or grow the daemon).
inline constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

// Why a path cannot be a config file ("no such file", "not a regular file",
// too large); empty when it can.
std::string config_file_check(const std::string& path);

// Stores the settings in `path` into `config`, in the file's order, and
// returns the names of those it gave. An error is one line starting with
// "FILE:LINE: " where the file has one; `config` may then hold some of the
// file's settings.
std::expected<std::vector<std::string>, std::string> config_file_apply(const std::string& path,
                                                                       DaemonConfig& config);

}  // namespace kvtier::daemon
