// The settings table (config.h): one row per setting, in the order
// `kvtierd --help` lists them. A new setting is a field of DaemonConfig with
// its default, and a row here; its flag, config-file key, help line and
// config.get entry follow from the row.
#include <array>

#include "daemon/config.h"

namespace kvtier::daemon {

using nlohmann::json;

namespace {

using T = SettingType;
using G = SettingGroup;
using SetResult = std::expected<void, std::string>;

// A limit as a row's range. Immediate, so a limit a double could not hold
// exactly stops the build instead of blurring a check.
template <typename V>
consteval SettingRange range_of(Limit<V> limit) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (static_cast<double>(limit.max) > kExact) throw "a limit past 2^53 is not exact as a double";
  return {static_cast<double>(limit.min), static_cast<double>(limit.max)};
}

// A value already checked against the row's type and range, stored.
template <typename V>
SetResult stored(const json& v, V& field) {
  field = v.get<V>();
  return {};
}

// A choice already checked against the row's choices, parsed into `field`.
template <typename V, typename Parse>
SetResult parsed(Parse parse, const json& v, V& field) {
  auto p = parse(v.get<std::string>());
  if (!p) return std::unexpected(p.error());
  field = *p;
  return {};
}

constexpr std::string_view kDevices[] = {"auto", "cpu", "cuda"};
constexpr std::string_view kPolicies[] = {"fcfs", "priority"};
constexpr std::string_view kLogLevels[] = {"error", "warning", "info", "debug"};
constexpr std::string_view kWritePolicies[] = {"write_back", "write_through"};
constexpr std::string_view kFormats[] = {"exact", "int8"};
constexpr std::string_view kPreemptions[] = {"swap", "recompute"};
constexpr std::string_view kTools[] = {"auto", "none"};
constexpr std::string_view kRemoteWrites[] = {"through", "back", "off"};

// Captureless lambdas, so each row is plain data.
const std::array<Setting, 40> kSettings = {{
    {.name = "model",
     .type = T::kDirectory,
     .group = G::kGeneral,
     .runtime = false,
     .description = "Model folder (config.json, model.safetensors)",
     .default_found_at_start = true,
     .get = [](const DaemonConfig& c) -> json { return c.model_dir; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.model_dir); }},
    {.name = "threads",
     .type = T::kInt,
     .group = G::kGeneral,
     .runtime = false,
     .description = "Compute threads; 0 = OpenMP's default",
     .range = range_of(limits::kThreads),
     .get = [](const DaemonConfig& c) -> json { return c.threads; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.threads); }},
    {.name = "device",
     .type = T::kChoice,
     .group = G::kGeneral,
     .runtime = false,
     .description = "Where the forward runs and L1 lives: cuda (the GPU: L1 in its memory, L2 and "
                    "L3 as with cpu), cpu (L1 in host memory), or auto (cuda when this build has "
                    "it, a device is usable and the default eviction policy is not h2o; else cpu)",
     .choices = kDevices,
     .get = [](const DaemonConfig& c) -> json { return c.device; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.device); }},
    {.name = "page_size",
     .type = T::kInt,
     .group = G::kGeneral,
     .runtime = false,
     .description = "Tokens per KV block",
     .range = range_of(limits::kPageSize),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.page_size; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.page_size); }},

    {.name = "socket",
     .type = T::kText,
     .group = G::kServer,
     .runtime = false,
     .description = "Unix socket path (its folder is created)",
     .default_found_at_start = true,
     .get = [](const DaemonConfig& c) -> json { return c.socket_path; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.socket_path); }},
    {.name = "max_kv_tokens",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = false,
     .description = "KV positions resident at once",
     .range = range_of(limits::kMaxKvTokens),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.max_kv_tokens; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.max_kv_tokens); }},
    {.name = "max_batch_size",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = true,
     .description = "Requests admitted at once",
     .range = range_of(limits::kMaxBatchSize),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.max_batch_size; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.max_batch_size); }},
    {.name = "token_budget",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = true,
     .description = "Tokens per forward pass (at least max-batch-size); 0 = chosen at start from "
                    "what passes cost on this device (config.get says what and why)",
     .range = range_of(limits::kTokenBudget),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.token_budget; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.token_budget); }},
    {.name = "mixed_prefill_tokens",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = true,
     .description = "Prompt tokens a forward pass takes beside running decodes (chunked "
                    "prefill); 0 = chosen with token_budget 0 so that such a pass takes at most "
                    "2.5x a decode step, else no cap",
     .range = range_of(limits::kTokenBudget),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.mixed_prefill_tokens; },
     .set = [](DaemonConfig& c,
               const json& v) { return stored(v, c.scheduler.mixed_prefill_tokens); }},
    {.name = "policy",
     .type = T::kChoice,
     .group = G::kServer,
     .runtime = true,
     .description = "Admission order",
     .choices = kPolicies,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.policy));
     },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(parse_policy, v, c.scheduler.policy); }},
    {.name = "max_line_bytes",
     .type = T::kBytes,
     .group = G::kServer,
     .runtime = true,
     .description = "Longest request line accepted",
     .range = range_of(limits::kMaxLineBytes),
     .get = [](const DaemonConfig& c) -> json { return c.max_line_bytes; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.max_line_bytes); }},
    {.name = "max_output_bytes",
     .type = T::kBytes,
     .group = G::kServer,
     .runtime = false,
     .description = "Reply bytes queued for a client before it is dropped",
     .range = range_of(limits::kMaxOutputBytes),
     .get = [](const DaemonConfig& c) -> json { return c.max_output_bytes; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.max_output_bytes); }},
    {.name = "max_pending",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = true,
     .description = "Requests queued or running, all clients",
     .range = range_of(limits::kMaxPending),
     .get = [](const DaemonConfig& c) -> json { return c.max_pending; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.max_pending); }},
    {.name = "max_connections",
     .type = T::kInt,
     .group = G::kServer,
     .runtime = false,
     .description = "Connections served at once",
     .range = range_of(limits::kMaxConnections),
     .get = [](const DaemonConfig& c) -> json { return c.max_connections; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.max_connections); }},
    {.name = "drain_timeout",
     .type = T::kSeconds,
     .group = G::kServer,
     .runtime = true,
     .description = "Seconds running requests may finish in when stopping, then they are "
                    "cancelled; 0 = cancel at once",
     .range = range_of(limits::kDrainTimeout),
     .get = [](const DaemonConfig& c) -> json { return c.drain_timeout; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.drain_timeout); }},
    {.name = "http_timeout",
     .type = T::kSeconds,
     .group = G::kServer,
     .runtime = true,
     .description = "Seconds an HTTP request may take to arrive whole (then 408), and an idle "
                    "keep-alive HTTP connection stays open",
     .range = range_of(limits::kHttpTimeout),
     .get = [](const DaemonConfig& c) -> json { return c.http_timeout; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.http_timeout); }},
    {.name = "log_level",
     .type = T::kChoice,
     .group = G::kServer,
     .runtime = true,
     .description = "Messages logged: this level and the more severe ones",
     .choices = kLogLevels,
     .get = [](const DaemonConfig& c) -> json { return std::string(to_string(c.log_level)); },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(wire::log_level_parse, v, c.log_level); }},
    {.name = "socket_group",
     .type = T::kText,
     .group = G::kServer,
     .runtime = false,
     .description = "Group the socket file is given to (mode 0660); empty = the daemon's",
     .get = [](const DaemonConfig& c) -> json { return c.socket_group; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.socket_group); }},
    {.name = "http_listen",
     .type = T::kText,
     .group = G::kServer,
     .runtime = false,
     .description = "Serve the HTTP API and JSON-RPC on TCP too: HOST:PORT, or a port alone for "
                    "loopback; empty = the socket only. Beyond loopback http_api_key_file is "
                    "required",
     .get = [](const DaemonConfig& c) -> json { return c.http_listen; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.http_listen); }},
    {.name = "http_api_key_file",
     .type = T::kText,
     .group = G::kServer,
     .runtime = false,
     .description = "A file (readable by its owner only) holding the API key TCP clients give: "
                    "HTTP as \"Authorization: Bearer <key>\", JSON-RPC by `auth`; empty = none",
     .get = [](const DaemonConfig& c) -> json { return c.http_api_key_file; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.http_api_key_file); }},
    {.name = "allow_any_uid",
     .type = T::kBool,
     .group = G::kServer,
     .runtime = false,
     .description = "Let every client that can connect make privileged calls (shutdown, "
                    "config.set, cache.pin, cache.unpin, cache.flush); off: only the daemon's "
                    "uid and root",
     .get = [](const DaemonConfig& c) -> json { return c.allow_any_uid; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.allow_any_uid); }},

    {.name = "prefix_cache",
     .type = T::kBool,
     .group = G::kTiers,
     .runtime = false,
     .description = "Keep finished requests' KV blocks and share them with requests whose prompt "
                    "starts the same; blocks move down L1 -> L2 -> L3 instead of being dropped",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.prefix_cache; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.prefix_cache); }},
    {.name = "l1_bytes",
     .type = T::kBytes,
     .group = G::kTiers,
     .runtime = false,
     .description = "L1 pool (the engine's) in bytes; 0 = exactly max-kv-tokens' worth. More "
                    "keeps more cached blocks beside the running requests'",
     .range = range_of(limits::kTierBytes),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.l1_bytes; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.l1_bytes); }},
    {.name = "l2_bytes",
     .type = T::kBytes,
     .group = G::kTiers,
     .runtime = false,
     .description = "L2 pinned host pool in bytes (mlock()ed); 0 = no L2",
     .range = range_of(limits::kTierBytes),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.l2_bytes; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.cache.l2_bytes); }},
    {.name = "l3_path",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "L3 directory: a preallocated slab file and its RocksDB index, kept across "
                    "restarts; empty = no L3. An unusable path is logged and kvtierd runs on "
                    "L1 + L2",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.l3_path; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.cache.l3_path); }},
    {.name = "l3_bytes",
     .type = T::kBytes,
     .group = G::kTiers,
     .runtime = false,
     .description = "L3 slab file size in bytes (used with --l3-path)",
     .range = range_of(limits::kTierBytes),
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.l3_bytes; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.cache.l3_bytes); }},
    {.name = "write_policy",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "write_back: a block is written to L3 once it has left L1 for L2 (and every "
                    "cached block at a clean shutdown); write_through: a block is written to L3 "
                    "as it enters the cache, when its request ends or is preempted (survives a "
                    "crash, but for what running requests hold)",
     .choices = kWritePolicies,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.write_policy));
     },
     .set =
         [](DaemonConfig& c, const json& v) {
           return parsed(parse_write_policy, v, c.scheduler.cache.write_policy);
         }},
    {.name = "l2_format",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "How L2 stores a block: exact (the computed bytes) | int8 (quantised: about "
                    "4x the blocks in the same --l2-bytes, but lossy: tokens served from it may "
                    "differ from recomputing; exact tiers keep them identical)",
     .choices = kFormats,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.l2_format));
     },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(parse_kv_format, v, c.scheduler.cache.l2_format); }},
    {.name = "l3_format",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "How L3 stores a block: exact | int8 (as --l2-format). With L3 on, "
                    "--l2-format int8 needs --l3-format int8; a store written in the other "
                    "format starts empty",
     .choices = kFormats,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.l3_format));
     },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(parse_kv_format, v, c.scheduler.cache.l3_format); }},
    {.name = "load_by_layer",
     .type = T::kBool,
     .group = G::kTiers,
     .runtime = false,
     .description = "Bring a request's cached prefix up from L3 (and from L2 into GPU memory) a "
                    "layer at a time and start its prefill on the first layers while the rest are "
                    "on the way (blocks are still checked whole before a token is sent); off: wait "
                    "for whole blocks",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.load_by_layer; },
     .set = [](DaemonConfig& c,
               const json& v) { return stored(v, c.scheduler.cache.load_by_layer); }},
    {.name = "remote",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "The remote tier, below L3: a Redis server (redis://HOST:PORT, HOST:PORT or a "
                    "Unix socket path) or a Redis Cluster (its seeds, comma-separated) that "
                    "daemons on many machines share prefixes through; empty = none. One that "
                    "cannot be reached at start is logged and kvtierd runs without it",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.remote; },
     .set = [](DaemonConfig& c, const json& v) { return stored(v, c.scheduler.cache.remote); }},
    {.name = "remote_namespace",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "Daemons share remote blocks only within a namespace (1 to 64 of A-Z a-z 0-9 "
                    "_ . -); the model, format and cache_salt keep blocks apart within one",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.remote_namespace; },
     .set = [](DaemonConfig& c,
               const json& v) { return stored(v, c.scheduler.cache.remote_namespace); }},
    {.name = "remote_write",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "When this daemon shares a block: through (as it enters the cache, when its "
                    "request ends or is preempted) | back (once it is in L2) | off (it only reads "
                    "what others share)",
     .choices = kRemoteWrites,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(remote_write_name(c.scheduler.cache.remote_write));
     },
     .set =
         [](DaemonConfig& c, const json& v) {
           return parsed(parse_remote_write, v, c.scheduler.cache.remote_write);
         }},
    {.name = "remote_format",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "How the remote tier stores a block: exact | int8 (as --l2-format); daemons "
                    "share only blocks of the same format",
     .choices = kFormats,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.cache.remote_format));
     },
     .set =
         [](DaemonConfig& c, const json& v) {
           return parsed(parse_kv_format, v, c.scheduler.cache.remote_format);
         }},
    {.name = "remote_timeout",
     .type = T::kSeconds,
     .group = G::kTiers,
     .runtime = false,
     .description = "Seconds the remote tier may take to connect or to answer a round of "
                    "operations; past it the server counts as failed and is skipped until it "
                    "answers again",
     .range = range_of(limits::kRemoteTimeout),
     .get = [](const DaemonConfig& c) -> json {
       return static_cast<double>(c.scheduler.cache.remote_timeout.count()) / 1000;
     },
     .set = [](DaemonConfig& c, const json& v) -> SetResult {
       c.scheduler.cache.remote_timeout =
           std::chrono::milliseconds(static_cast<long>(v.get<double>() * 1000 + 0.5));
       return {};
     }},
    {.name = "remote_password_file",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "A file holding the Redis password (AUTH), readable by no other user; empty = "
                    "none. The password itself is never a setting: it would show in ps and "
                    "config.get",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.remote_password_file; },
     .set = [](DaemonConfig& c,
               const json& v) { return stored(v, c.scheduler.cache.remote_password_file); }},
    {.name = "remote_secret",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "A file holding the fleet's secret (16 to 4096 bytes, readable by no other "
                    "user): every remote block then carries an HMAC, and blocks without a valid "
                    "one are never used. Every daemon of a namespace needs the same one; empty = "
                    "none",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.cache.remote_secret; },
     .set = [](DaemonConfig& c,
               const json& v) { return stored(v, c.scheduler.cache.remote_secret); }},
    // Its default follows prefix_cache, which the command line resolves
    // (cli.cpp): DaemonConfig{} has the cache on, so swap.
    {.name = "preemption",
     .type = T::kChoice,
     .group = G::kTiers,
     .runtime = false,
     .description = "A preempted request's KV: swap (moved down the tiers and back, nothing "
                    "recomputed; needs the prefix cache) | recompute. Default: swap with the "
                    "prefix cache, else recompute",
     .choices = kPreemptions,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(to_string(c.scheduler.preemption));
     },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(parse_preemption, v, c.scheduler.preemption); }},
    // Parsed here; checked against page_size once every setting is in
    // (cli.cpp).
    {.name = "eviction",
     .type = T::kText,
     .group = G::kTiers,
     .runtime = false,
     .description = "KV eviction policy of requests that name none: none | window:W | "
                    "sinks:S,window:W | "
                    "h2o:start=S,recent=R,max=M[,agg=sum|norm_sum][,snapkv=W][,kvcrush=B:ANCHOR]"
                    "[,rotate=on]",
     .get = [](const DaemonConfig& c) -> json { return c.scheduler.eviction.to_string(); },
     .set = [](DaemonConfig& c,
               const json& v) { return parsed(EvictionPolicy::parse, v, c.scheduler.eviction); }},
    {.name = "tools",
     .type = T::kChoice,
     .group = G::kServer,
     .runtime = false,
     .description = "The tool a model calls itself, for requests that do not say (tool_choice): "
                    "auto = run it where the vocabulary has one (nanochat's calculator: "
                    "<|python_start|>expression<|python_end|> answered with "
                    "<|output_start|>result<|output_end|>) | none",
     .choices = kTools,
     .get = [](const DaemonConfig& c) -> json {
       return std::string(c.scheduler.tools ? "auto" : "none");
     },
     .set = [](DaemonConfig& c, const json& v) -> SetResult {
       c.scheduler.tools = v == "auto";
       return {};
     }},
}};

}  // namespace

std::span<const Setting> settings() { return kSettings; }

}  // namespace kvtier::daemon
