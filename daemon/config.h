// kvtierd's settings: one struct holding every setting with its default and
// trade-off, and one table with a row per setting (name, type, range or
// choices, description, whether it may change at run time, and how it reads
// and writes as JSON). Everything that lists settings is generated from the
// table, so none is kept twice: the flags, the config file's keys and
// `kvtierd --help` (setting_flags.h), `config.get`, `config.set` and the
// SIGHUP reload. The rows live in settings_table.cpp.
//
// A setting's name is its command-line flag and config-file key with '_' for
// '-' (`--max-batch-size`, `max-batch-size = 8`, "max_batch_size").
//
// Runtime settings change while the daemon runs, by `config.set` or by
// SIGHUP re-reading the --config file: log_level, max_pending,
// max_line_bytes, drain_timeout, http_timeout, and the scheduler's token_budget,
// mixed_prefill_tokens, max_batch_size and policy (Scheduler::reconfigure).
// Every other setting is fixed at start-up: config.get shows it as
// read-only, and changing it takes a restart. That includes the prefix
// cache and its tiers (prefix_cache, l1_bytes, l2_bytes, l3_path, l3_bytes,
// write_policy, l2_format, l3_format, load_by_layer, and the remote tier's
// remote_*), preemption and the default eviction policy: the pools are
// sized and the stores opened once.
//
// Thread-safety: the functions are pure; a DaemonConfig is a plain value
// and the table is constant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduling/scheduler.h"
#include "wire/log.h"

namespace kvtier::daemon {

// The accepted range of a numeric setting, both ends included.
template <typename T>
struct Limit {
  T min, max;
  constexpr bool contains(T v) const { return v >= min && v <= max; }
};

// Every numeric setting's range, which its row in the settings table
// carries: the command line, the config file (so SIGHUP's re-read too) and
// config.set check against it. Whether sizes fit the machine (memory, disk)
// is checked where the pools and the L3 slab are made, against what the
// machine has.
namespace limits {
inline constexpr Limit<int> kThreads{0, 1024};
inline constexpr Limit<int> kPageSize{1, SchedulerConfig::kMaxPageSize};
// At least one page (SchedulerConfig::validate), at most 16 Mi positions.
inline constexpr Limit<int> kMaxKvTokens{1, 1 << 24};
inline constexpr Limit<int> kMaxBatchSize{1, 1 << 20};
// token_budget and mixed_prefill_tokens; 0 = chosen at start
// (engine/scheduling/budget_choice.h).
inline constexpr Limit<int> kTokenBudget{0, 1 << 20};
inline constexpr Limit<int> kMaxPending{1, 1 << 20};
inline constexpr Limit<int> kMaxConnections{1, 1 << 16};
// At least 1 KiB, so that a config.set raising it again always fits on a
// line (at 64 bytes none did, and only a restart undid it).
inline constexpr Limit<std::size_t> kMaxLineBytes{1024, std::size_t{1} << 30};
inline constexpr Limit<std::size_t> kMaxOutputBytes{4096, std::size_t{1} << 30};
inline constexpr Limit<double> kDrainTimeout{0, 86400};
inline constexpr Limit<double> kHttpTimeout{0.1, 3600};
// l1_bytes, l2_bytes, l3_bytes: 1 TiB, far past any machine's tier yet
// small enough that block counts fit an int.
inline constexpr Limit<std::uint64_t> kTierBytes{0, std::uint64_t{1} << 40};
// remote_timeout: a millisecond to a minute.
inline constexpr Limit<double> kRemoteTimeout{0.001, 60};
}  // namespace limits

struct DaemonConfig {
  // Fixed at start-up.
  std::string model_dir;                   // config.json + model.safetensors
  int threads = 0;                         // compute threads; 0 = OpenMP's default
  std::string device = "auto";             // auto | cpu | cuda: where the forward runs
  std::string socket_path;                 // ignored under socket activation
  std::string socket_group;                // group of the socket file; empty = the daemon's own
  bool allow_any_uid = false;              // privileged calls from any uid, not only ours and root
  std::size_t max_output_bytes = 8 << 20;  // replies queued for a client before it is dropped
  int max_connections = 64;                // connections served at once
  // The HTTP API on TCP as well as on the socket: "HOST:PORT", or a port
  // alone for loopback; empty = the socket only. Beyond loopback an API key
  // file is required (wire/http/listener.h).
  std::string http_listen;
  std::string http_api_key_file;  // a file (mode 0600) holding the Bearer token HTTP needs

  // A service holds many sequences at once: 16 full contexts of the bundled
  // model (16 MiB of KV for it) rather than the engine's single-context
  // default. page_size and max_kv_tokens are fixed (the pool is sized by
  // them); token_budget, mixed_prefill_tokens, max_batch_size and policy
  // are runtime.
  //
  // The token budgets are chosen at start from what passes cost on the
  // device (engine/scheduling/budget_choice.h): a fixed 16 made a cold 1024-token
  // prompt 2.7x (CPU) to 12x (GPU) slower than it need be.
  //
  // Unlike the engine, a service keeps the prefix cache on by default:
  // repeated prefixes (system prompts, conversations) are its common case.
  // L2 (pinned host memory, mlock()ed up front) gets 256 MiB; L3 is off
  // until l3_path names a directory, and then gets l3_bytes of slab file.
  // Preemption swaps through the tiers when the cache is on (no token is
  // computed twice) and recomputes when it is off (cli.cpp picks).
  SchedulerConfig scheduler = [] {
    SchedulerConfig s;
    s.max_kv_tokens = 4096;
    s.token_budget = SchedulerConfig::kAuto;
    s.prefix_cache = true;
    s.preemption = PreemptionMode::kSwap;
    s.cache.l2_bytes = std::size_t{256} << 20;
    s.cache.l3_bytes = std::size_t{4} << 30;
    return s;
  }();

  // Runtime.
  wire::LogLevel log_level = wire::LogLevel::kInfo;
  // Requests queued or running over all clients; more get -32000. Lowering it
  // refuses new requests until enough of those pending finish.
  int max_pending = 256;
  // Longest request line accepted; a longer one gets -32001. Applies to
  // every connection from its next read.
  std::size_t max_line_bytes = 1 << 20;
  // Seconds a stopping daemon (SIGTERM, SIGINT, `shutdown`) lets running
  // requests finish before cancelling the rest. Longer loses less work;
  // systemd's TimeoutStopSec must exceed it. 0 cancels at once.
  double drain_timeout = 10;
  // Seconds an HTTP request may take to arrive whole from its first byte
  // (slow clients get 408 and are closed), and an idle keep-alive HTTP
  // connection stays open.
  double http_timeout = 30;
};

// How a setting's value reads in JSON (config.get, config.set), and so on
// the command line and in the config file.
enum class SettingType {
  kBool,       // true | false; the flags --x and --no-x
  kInt,        // an integer in the row's range
  kBytes,      // an integer in the row's range; a flag or file key also takes
               // a suffix in powers of 1024 (256M, 4GiB)
  kSeconds,    // a number in the row's range
  kText,       // any string
  kDirectory,  // the path of a directory, which must exist at start-up
  kChoice,     // one of the row's choices
};

// Where `kvtierd --help` lists a setting: with the general options, under
// "server" or under "tiers".
enum class SettingGroup { kGeneral, kServer, kTiers };

// A numeric setting's range (`limits`), as doubles: every limit is an
// integer far below 2^53 (so each end is exact) or, for a setting in
// seconds, a decimal fraction (remote_timeout's 0.001).
struct SettingRange {
  double min = 0, max = 0;
};

// One row of the settings table. Its default is DaemonConfig{}'s value, read
// through `get`: the struct above states each default once, with its
// trade-off.
struct Setting {
  const char* name;  // config.get's key; the flag and file key use '-' for '_'
  SettingType type;
  SettingGroup group;
  bool runtime;                                 // config.set and SIGHUP may change it
  const char* description;                      // for --help and config.get
  SettingRange range{};                         // kInt, kBytes, kSeconds
  std::span<const std::string_view> choices{};  // kChoice
  // model and socket: main finds their defaults at start (cli.h), so
  // DaemonConfig{}'s empty value is none.
  bool default_found_at_start = false;
  nlohmann::json (*get)(const DaemonConfig&) = nullptr;
  // Stores a value setting_store() has checked against the row's type and
  // range or choices. Fails only where the row parses further (eviction).
  std::expected<void, std::string> (*set)(DaemonConfig&, const nlohmann::json&) = nullptr;
};

// Every setting, in the order `kvtierd --help` lists them.
std::span<const Setting> settings();

// The row named `name` ("max_batch_size"), or null.
const Setting* setting_find(std::string_view name);

// The row's flag: "--max-batch-size" for max_batch_size.
std::string setting_flag(const Setting& s);

// One end of a numeric range as people write it: "1048576", "0.001".
std::string range_end_text(double v);

// What the row accepts, for messages: "an integer in [1, 1048576]".
std::string setting_accepts(const Setting& s);

// Checks `value` against the row's type and range or choices, then stores
// it in `config`. The error says what the row accepts and what it got
// ("must be an integer in [1, 1048576], got 0") without naming the setting:
// config.set names it 'max_pending', the command line --max-pending. The
// command line, the config file and config.set all store through here, so
// they accept the same values.
std::expected<void, std::string> setting_store(const Setting& s, DaemonConfig& config,
                                               const nlohmann::json& value);

// {"<name>": {"value": ..., "runtime": bool, "description": "...",
// "default": ..., "range": [min, max] | "choices": [...]}, ...} for every
// setting. "default" is absent where main finds it at start (model,
// socket); "range" only for numbers, "choices" only for choices.
nlohmann::json config_to_json(const DaemonConfig& config);

// `current` with the settings `changes` names ({"token_budget": 32, ...})
// replaced. Refused, naming the culprit: `changes` not an object or empty,
// an unknown name, a setting that is not runtime, a wrong type, a value out
// of range, or a scheduler combination SchedulerConfig::validate() refuses.
std::expected<DaemonConfig, std::string> config_with_changes(const DaemonConfig& current,
                                                             const nlohmann::json& changes);

// `current` with the runtime settings of `loaded` (a re-read config file),
// checked as config_with_changes checks them.
std::expected<DaemonConfig, std::string> config_with_runtime_of(const DaemonConfig& current,
                                                                const DaemonConfig& loaded);

struct SettingChange {
  const Setting* setting;
  nlohmann::json from, to;
};
// The settings whose values differ between `a` and `b`, in table order.
std::vector<SettingChange> config_diff(const DaemonConfig& a, const DaemonConfig& b);

}  // namespace kvtier::daemon
