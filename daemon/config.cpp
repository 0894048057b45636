#include "daemon/config.h"

#include <array>
#include <type_traits>

namespace kvtier::daemon {

using nlohmann::json;

namespace {

using SetResult = std::expected<void, std::string>;

template <typename T>
std::string range_text(Limit<T> limit) {
  auto text = [](T v) {
    if constexpr (std::is_floating_point_v<T>) return std::to_string(static_cast<long long>(v));
    return std::to_string(v);
  };
  return "[" + text(limit.min) + ", " + text(limit.max) + "]";
}

// An integer JSON value inside `limit`. JSON's non-negative integers parse
// as unsigned: the minimum applies to them too (it once did not, and
// "max_pending": 0 got through).
template <typename T>
std::expected<T, std::string> integer_in(const json& v, const char* name, Limit<T> limit) {
  const std::string refused = "'" + std::string(name) + "' must be an integer in " +
                              range_text(limit) + ", got " + v.dump();
  if (!v.is_number_integer()) return std::unexpected(refused);
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(limit.max) || u < static_cast<std::uint64_t>(limit.min))
      return std::unexpected(refused);
    return static_cast<T>(u);
  }
  const auto i = v.get<long long>();
  if (i < static_cast<long long>(limit.min) || i > static_cast<long long>(limit.max))
    return std::unexpected(refused);
  return static_cast<T>(i);
}

// The table. Captureless lambdas, so each entry is plain data.
const std::array<Setting, 28> kSettings = {{
    {"model", false, "model folder", [](const DaemonConfig& c) -> json { return c.model_dir; },
     nullptr},
    {"threads", false, "compute threads; 0 = OpenMP's default",
     [](const DaemonConfig& c) -> json { return c.threads; }, nullptr},
    {"device", false, "where the forward runs: auto | cpu | cuda (the log says which auto chose)",
     [](const DaemonConfig& c) -> json { return c.device; }, nullptr},
    {"socket", false, "Unix socket path",
     [](const DaemonConfig& c) -> json { return c.socket_path; }, nullptr},
    {"socket_group", false, "group of the socket file; empty = the daemon's",
     [](const DaemonConfig& c) -> json { return c.socket_group; }, nullptr},
    {"allow_any_uid", false, "privileged calls allowed to every uid",
     [](const DaemonConfig& c) -> json { return c.allow_any_uid; }, nullptr},
    {"max_connections", false, "connections served at once",
     [](const DaemonConfig& c) -> json { return c.max_connections; }, nullptr},
    {"max_output_bytes", false, "reply bytes queued for a client before it is dropped",
     [](const DaemonConfig& c) -> json { return c.max_output_bytes; }, nullptr},
    {"page_size", false, "tokens per KV block",
     [](const DaemonConfig& c) -> json { return c.scheduler.page_size; }, nullptr},
    {"max_kv_tokens", false, "KV positions resident at once",
     [](const DaemonConfig& c) -> json { return c.scheduler.max_kv_tokens; }, nullptr},
    {"prefix_cache", false, "share and keep KV blocks of common prefixes in L1, L2 and L3",
     [](const DaemonConfig& c) -> json { return c.scheduler.prefix_cache; }, nullptr},
    {"l1_bytes", false, "L1 pool bytes; 0 = exactly max_kv_tokens' worth",
     [](const DaemonConfig& c) -> json { return c.scheduler.l1_bytes; }, nullptr},
    {"l2_bytes", false, "L2 pinned host pool bytes; 0 = no L2",
     [](const DaemonConfig& c) -> json { return c.scheduler.cache.l2_bytes; }, nullptr},
    {"l3_path", false, "L3 directory (slab file and index); empty = no L3",
     [](const DaemonConfig& c) -> json { return c.scheduler.cache.l3_path; }, nullptr},
    {"l3_bytes", false, "L3 slab file bytes",
     [](const DaemonConfig& c) -> json { return c.scheduler.cache.l3_bytes; }, nullptr},
    {"write_policy", false, "when L3 gets a block: write_back | write_through",
     [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.write_policy));
     },
     nullptr},
    {"l2_format", false, "how L2 stores a block: exact | int8 (lossy, about 4x the blocks)",
     [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.l2_format));
     },
     nullptr},
    {"l3_format", false, "how L3 stores a block: exact | int8 (lossy, about 4x the blocks)",
     [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.l3_format));
     },
     nullptr},
    {"load_by_layer", false,
     "bring cached prefixes up from L3 (and from L2 into GPU memory) a layer at a time",
     [](const DaemonConfig& c) -> json { return c.scheduler.cache.load_by_layer; }, nullptr},
    {"preemption", false, "a preempted request's KV: swap | recompute",
     [](const DaemonConfig& c) -> json { return std::string(to_string(c.scheduler.preemption)); },
     nullptr},
    {"eviction", false, "KV eviction policy of requests that name none",
     [](const DaemonConfig& c) -> json { return c.scheduler.eviction.to_string(); }, nullptr},
    {"max_batch_size", true, "requests admitted at once",
     [](const DaemonConfig& c) -> json { return c.scheduler.max_batch_size; },
     [](DaemonConfig& c, const json& v) -> SetResult {
       auto n = integer_in(v, "max_batch_size", limits::kMaxBatchSize);
       if (!n) return std::unexpected(n.error());
       c.scheduler.max_batch_size = *n;
       return {};
     }},
    {"token_budget", true, "tokens per forward pass (>= max_batch_size)",
     [](const DaemonConfig& c) -> json { return c.scheduler.token_budget; },
     [](DaemonConfig& c, const json& v) -> SetResult {
       auto n = integer_in(v, "token_budget", limits::kTokenBudget);
       if (!n) return std::unexpected(n.error());
       c.scheduler.token_budget = *n;
       return {};
     }},
    {"policy", true, "admission order: fcfs | priority",
     [](const DaemonConfig& c) -> json { return std::string(to_string(c.scheduler.policy)); },
     [](DaemonConfig& c, const json& v) -> SetResult {
       if (!v.is_string()) return std::unexpected("'policy' must be \"fcfs\" or \"priority\"");
       auto p = parse_policy(v.get<std::string>());
       if (!p) return std::unexpected("'policy': " + p.error());
       c.scheduler.policy = *p;
       return {};
     }},
    {"max_pending", true, "requests queued or running, all clients",
     [](const DaemonConfig& c) -> json { return c.max_pending; },
     [](DaemonConfig& c, const json& v) -> SetResult {
       auto n = integer_in(v, "max_pending", limits::kMaxPending);
       if (!n) return std::unexpected(n.error());
       c.max_pending = *n;
       return {};
     }},
    {"max_line_bytes", true, "longest request line accepted",
     [](const DaemonConfig& c) -> json { return c.max_line_bytes; },
     [](DaemonConfig& c, const json& v) -> SetResult {
       auto n = integer_in(v, "max_line_bytes", limits::kMaxLineBytes);
       if (!n) return std::unexpected(n.error());
       c.max_line_bytes = *n;
       return {};
     }},
    {"log_level", true, "error | warning | info | debug",
     [](const DaemonConfig& c) -> json { return std::string(to_string(c.log_level)); },
     [](DaemonConfig& c, const json& v) -> SetResult {
       if (!v.is_string()) return std::unexpected("'log_level' must be a string");
       auto level = log_level_parse(v.get<std::string>());
       if (!level) return std::unexpected("'log_level': " + level.error());
       c.log_level = *level;
       return {};
     }},
    {"drain_timeout", true, "seconds running requests may finish in when the daemon stops",
     [](const DaemonConfig& c) -> json { return c.drain_timeout; },
     [](DaemonConfig& c, const json& v) -> SetResult {
       if (!v.is_number() || !limits::kDrainTimeout.contains(v.get<double>())) {
         return std::unexpected("'drain_timeout' must be a number of seconds in " +
                                range_text(limits::kDrainTimeout) + ", got " + v.dump());
       }
       c.drain_timeout = v.get<double>();
       return {};
     }},
}};

const Setting* setting_find(std::string_view name) {
  for (const Setting& s : kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string runtime_names() {
  std::string names;
  for (const Setting& s : kSettings) {
    if (!s.runtime) continue;
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  return names;
}

}  // namespace

std::span<const Setting> settings() { return kSettings; }

json config_to_json(const DaemonConfig& config) {
  json out = json::object();
  for (const Setting& s : kSettings)
    out[s.name] = {{"value", s.get(config)}, {"runtime", s.runtime}};
  return out;
}

std::expected<DaemonConfig, std::string> config_with_changes(const DaemonConfig& current,
                                                             const json& changes) {
  if (!changes.is_object() || changes.empty()) {
    return std::unexpected("config.set takes {\"<setting>\": <value>, ...}; runtime settings: " +
                           runtime_names());
  }
  DaemonConfig next = current;
  for (const auto& [name, value] : changes.items()) {
    const Setting* s = setting_find(name);
    if (!s) {
      return std::unexpected("unknown setting '" + name +
                             "' (runtime settings: " + runtime_names() + ")");
    }
    if (!s->runtime) {
      std::string flag = name;
      for (char& ch : flag) ch = ch == '_' ? '-' : ch;
      return std::unexpected("'" + name + "' cannot change while kvtierd runs (restart it with --" +
                             flag + ")");
    }
    if (auto ok = s->set(next, value); !ok) return std::unexpected(ok.error());
  }
  if (auto ok = next.scheduler.validate(); !ok) return std::unexpected(ok.error());
  return next;
}

std::expected<DaemonConfig, std::string> config_with_runtime_of(const DaemonConfig& current,
                                                                const DaemonConfig& loaded) {
  json changes = json::object();
  for (const Setting& s : kSettings) {
    if (s.runtime) changes[s.name] = s.get(loaded);
  }
  return config_with_changes(current, changes);
}

std::vector<SettingChange> config_diff(const DaemonConfig& a, const DaemonConfig& b) {
  std::vector<SettingChange> changes;
  for (const Setting& s : kSettings) {
    json from = s.get(a), to = s.get(b);
    if (from != to) changes.push_back({&s, std::move(from), std::move(to)});
  }
  return changes;
}

}  // namespace kvtier::daemon
