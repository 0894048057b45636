#include "daemon/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string_view>

namespace kvtier::daemon {

namespace {

// A flag's check from the table of limits (config.h).
template <typename T>
CLI::Range range(Limit<T> limit) {
  return CLI::Range(limit.min, limit.max);
}

// A config file is a regular file of at most kMaxConfigBytes: CLI11 reads
// the whole of it into memory, so /dev/zero or a FIFO would hang the daemon
// and grow it without bound.
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;
std::string config_file_check(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return path + ": no such file";
  if (!std::filesystem::is_regular_file(status)) return path + ": not a regular file";
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) return path + ": " + ec.message();
  if (bytes > kMaxConfigBytes)
    return path + ": " + std::to_string(bytes) + " bytes; a config file has at most " +
           std::to_string(kMaxConfigBytes);
  return "";
}

// `text` for an error message: at most 64 bytes, and bytes that are not
// printable ASCII as \xNN, so a binary file cannot garble the terminal.
std::string printable(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > 64) out += "...";
  return out;
}

// The tier settings that depend on one another, in flag words: the
// preemption default follows the prefix cache, and the L2 default (256 MiB)
// quietly goes with it when the cache is off, while an L2 or L3 asked for by
// name without the cache is an error rather than ignored.
std::expected<void, std::string> tiers_resolve(SchedulerConfig& s, const std::string& preemption,
                                               const std::string& eviction, bool l2_given) {
  if (preemption.empty()) {
    s.preemption = s.prefix_cache ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  } else {
    auto mode = parse_preemption(preemption);
    if (!mode) return std::unexpected("--preemption: " + mode.error());
    s.preemption = *mode;
  }
  if (!s.prefix_cache) {
    if (s.preemption == PreemptionMode::kSwap) {
      return std::unexpected(
          "--preemption swap moves KV through the prefix cache, which --no-prefix-cache turns "
          "off (use --preemption recompute, or keep the prefix cache)");
    }
    if (!s.cache.l3_path.empty() || (l2_given && s.cache.l2_bytes > 0)) {
      return std::unexpected(
          "--l2-bytes and --l3-path are tiers of the prefix cache, which --no-prefix-cache turns "
          "off");
    }
    s.cache.l2_bytes = 0;
  }
  if (!s.cache.l3_path.empty() && s.cache.l3_bytes == 0) {
    return std::unexpected("--l3-path is set but --l3-bytes is 0 (give the slab file a size)");
  }
  if (auto ok = s.cache.validate(); !ok)
    return std::unexpected("--l2-format, --l3-format: " + ok.error());
  auto policy = EvictionPolicy::parse(eviction);
  if (!policy) return std::unexpected("--eviction: " + policy.error());
  if (auto ok = policy->validate(s.page_size); !ok) {
    return std::unexpected("--eviction: " + ok.error());
  }
  s.eviction = *policy;
  return {};
}

}  // namespace

std::expected<CommandLine, CliExit> cli_parse(const std::vector<std::string>& args,
                                              const DaemonConfig& defaults) {
  CommandLine cl;
  cl.config = defaults;
  DaemonConfig& c = cl.config;
  OneShotOptions one;
  std::string policy(to_string(c.scheduler.policy));
  std::string log_level(to_string(c.log_level));

  CLI::App app{
      "kvtierd: KV-cache tiering inference daemon.\n"
      "Serves JSON-RPC on a Unix socket; with --prompt, generates once and exits.\n"
      "Settings marked (runtime) change without a restart: `kvtierctl config set`, or edit\n"
      "the --config file and send SIGHUP."};
  app.set_config("--config", "",
                 "Read settings from this TOML/INI file: keys are the long flag names "
                 "(max-kv-tokens = 8192); command-line flags win")
      ->check(CLI::Validator(config_file_check, "FILE"));
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--model", c.model_dir, "Model folder (config.json, model.safetensors)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--threads", c.threads, "Compute threads; 0 = OpenMP's default")
      ->check(range(limits::kThreads));
  app.add_option(
         "--device", c.device,
         "Where the forward runs and L1 lives: cuda (the GPU: L1 in its memory, L2 and "
         "L3 as with cpu), cpu (L1 in host memory), or auto (cuda when this build has it, a "
         "device is usable and the default eviction policy is not h2o; else cpu)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--page-size", c.scheduler.page_size, "Tokens per KV block")
      ->check(range(limits::kPageSize))
      ->capture_default_str();

  auto* oneshot = app.add_option_group("one-shot", "Generate once from the command line and exit");
  auto* prompt_opt =
      oneshot->add_option("--prompt", one.prompt, "Generate a continuation of this text and exit");
  oneshot->add_option("--max-tokens", one.max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  oneshot->add_option("--temperature", one.temperature, "Sampling temperature; 0 = greedy")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  oneshot->add_option("--top-k", one.top_k, "Keep the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  oneshot->add_option("--top-p", one.top_p, "Nucleus sampling mass in (0, 1]")
      ->capture_default_str();
  oneshot->add_option("--seed", one.seed, "Seed of this request's random stream")
      ->capture_default_str();
  oneshot->add_option("--stop", one.stop, "Stop when this text appears (repeatable)");
  oneshot
      ->add_option("--prefill-chunk", one.prefill_chunk, "Prompt tokens per prefill step; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  auto* server = app.add_option_group("server", "Serve requests on a Unix socket");
  server->add_option("--socket", c.socket_path, "Unix socket path (its folder is created)")
      ->capture_default_str();
  server->add_option("--max-kv-tokens", c.scheduler.max_kv_tokens, "KV positions resident at once")
      ->check(range(limits::kMaxKvTokens))
      ->capture_default_str();
  server
      ->add_option("--max-batch-size", c.scheduler.max_batch_size,
                   "Requests admitted at once (runtime)")
      ->check(range(limits::kMaxBatchSize))
      ->capture_default_str();
  server
      ->add_option("--token-budget", c.scheduler.token_budget, "Tokens per forward pass (runtime)")
      ->check(range(limits::kTokenBudget))
      ->capture_default_str();
  server->add_option("--policy", policy, "Admission order: fcfs | priority (runtime)")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  server
      ->add_option("--max-line-bytes", c.max_line_bytes, "Longest request line accepted (runtime)")
      ->check(range(limits::kMaxLineBytes))
      ->capture_default_str();
  server
      ->add_option("--max-output-bytes", c.max_output_bytes,
                   "Reply bytes queued for a client before it is dropped")
      ->check(range(limits::kMaxOutputBytes))
      ->capture_default_str();
  server
      ->add_option("--max-pending", c.max_pending,
                   "Requests queued or running, all clients (runtime)")
      ->check(range(limits::kMaxPending))
      ->capture_default_str();
  server->add_option("--max-connections", c.max_connections, "Connections served at once")
      ->check(range(limits::kMaxConnections))
      ->capture_default_str();
  server
      ->add_option("--drain-timeout", c.drain_timeout,
                   "Seconds running requests may finish in when stopping, then they are "
                   "cancelled; 0 = cancel at once (runtime)")
      ->check(range(limits::kDrainTimeout))
      ->capture_default_str();
  server->add_option("--log-level", log_level, "error | warning | info | debug (runtime)")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  server->add_option("--socket-group", c.socket_group,
                     "Group the socket file is given to (mode 0660); default: the daemon's");
  server->add_flag("--allow-any-uid", c.allow_any_uid,
                   "Let every client that can connect make privileged calls (shutdown, "
                   "config.set, cache.pin, cache.unpin, cache.flush); default: only the "
                   "daemon's uid and root");

  // Sizes take a plain byte count or a suffix (CLI11's AsSizeValue, powers of
  // 1024: 256M, 4G, 512KiB), on the command line and in the file alike.
  // A negative size wraps around in the conversion; the range catches it.
  const CLI::AsSizeValue size(false);
  const CLI::Range size_range = range(limits::kTierBytes);
  std::string write_policy(to_string(c.scheduler.cache.write_policy));
  std::string l2_format(to_string(c.scheduler.cache.l2_format));
  std::string l3_format(to_string(c.scheduler.cache.l3_format));
  std::string preemption;  // empty: swap with the prefix cache, else recompute
  std::string eviction = c.scheduler.eviction.to_string();
  auto* tiers = app.add_option_group("tiers", "Prefix cache and KV tiers (restart to change)");
  tiers
      ->add_flag("--prefix-cache,!--no-prefix-cache", c.scheduler.prefix_cache,
                 "Keep finished requests' KV blocks and share them with requests whose prompt "
                 "starts the same; blocks move down L1 -> L2 -> L3 instead of being dropped")
      ->capture_default_str();
  tiers
      ->add_option("--l1-bytes", c.scheduler.l1_bytes,
                   "L1 pool (the engine's) in bytes; 0 = exactly max-kv-tokens' worth. More "
                   "keeps more cached blocks beside the running requests'")
      ->transform(size)
      ->check(size_range)
      ->capture_default_str();
  auto* l2_opt = tiers
                     ->add_option("--l2-bytes", c.scheduler.cache.l2_bytes,
                                  "L2 pinned host pool in bytes (mlock()ed); 0 = no L2")
                     ->transform(size)
                     ->check(size_range)
                     ->capture_default_str();
  tiers->add_option("--l3-path", c.scheduler.cache.l3_path,
                    "L3 directory: a preallocated slab file and its RocksDB index, kept across "
                    "restarts; empty = no L3. An unusable path is logged and kvtierd runs on "
                    "L1 + L2");
  tiers
      ->add_option("--l3-bytes", c.scheduler.cache.l3_bytes,
                   "L3 slab file size in bytes (used with --l3-path)")
      ->transform(size)
      ->check(size_range)
      ->capture_default_str();
  tiers
      ->add_option("--write-policy", write_policy,
                   "write_back: a block is written to L3 once it has left L1 for L2 (and every "
                   "cached block at a clean shutdown); write_through: every cached block is also "
                   "written to L3 at once (survives a crash)")
      ->check(CLI::IsMember({"write_back", "write_through"}))
      ->capture_default_str();
  tiers
      ->add_option("--l2-format", l2_format,
                   "How L2 stores a block: exact (the computed bytes) | int8 (quantised: about "
                   "4x the blocks in the same --l2-bytes, but lossy: tokens served from it may "
                   "differ from recomputing; exact tiers keep them identical)")
      ->check(CLI::IsMember({"exact", "int8"}))
      ->capture_default_str();
  tiers
      ->add_option("--l3-format", l3_format,
                   "How L3 stores a block: exact | int8 (as --l2-format). With L3 on, "
                   "--l2-format int8 needs --l3-format int8; a store written in the other "
                   "format starts empty")
      ->check(CLI::IsMember({"exact", "int8"}))
      ->capture_default_str();
  tiers
      ->add_flag("--load-by-layer,!--no-load-by-layer", c.scheduler.cache.load_by_layer,
                 "Bring a request's cached prefix up from L3 (and from L2 into GPU memory) a "
                 "layer at a time and start its prefill on the first layers while the rest are "
                 "on the way (blocks are still checked whole before a token is sent); off: wait "
                 "for whole blocks")
      ->capture_default_str();
  tiers->add_option("--preemption", preemption,
                    "A preempted request's KV: swap (moved down the tiers and back, nothing "
                    "recomputed; needs the prefix cache) | recompute. Default: swap with the "
                    "prefix cache, else recompute");
  tiers
      ->add_option("--eviction", eviction,
                   "KV eviction policy of requests that name none: none | window:W | "
                   "sinks:S,window:W | h2o:start=S,recent=R,max=M[,agg=sum|norm_sum]")
      ->capture_default_str();

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    CliExit exit;
    // CLI11 words an unknown config key as "INI was not able to parse KEY",
    // even for TOML; say what is wrong instead.
    const std::string what = e.what();
    const std::string prefix = "INI was not able to parse ";
    if (dynamic_cast<const CLI::ConfigError*>(&e) && what.starts_with(prefix)) {
      exit.code = e.get_exit_code();
      exit.err = "kvtierd: unknown setting '" + printable(what.substr(prefix.size())) +
                 "' in the config file (its keys are the long flag names: see --help)\n";
      return std::unexpected(exit);
    }
    std::ostringstream out, err;
    exit.code = app.exit(e, out, err);
    exit.out = out.str();
    exit.err = err.str();
    return std::unexpected(exit);
  }

  // IsMember checked these names, so they cannot fail.
  c.scheduler.policy = parse_policy(policy).value_or(c.scheduler.policy);
  c.log_level = log_level_parse(log_level).value_or(c.log_level);
  c.scheduler.cache.write_policy =
      parse_write_policy(write_policy).value_or(c.scheduler.cache.write_policy);
  c.scheduler.cache.l2_format = parse_kv_format(l2_format).value_or(c.scheduler.cache.l2_format);
  c.scheduler.cache.l3_format = parse_kv_format(l3_format).value_or(c.scheduler.cache.l3_format);
  if (auto ok = tiers_resolve(c.scheduler, preemption, eviction, l2_opt->count() > 0); !ok) {
    return std::unexpected(CliExit{2, "", "kvtierd: " + ok.error() + "\n"});
  }
  if (prompt_opt->count() > 0) {
    one.model_dir = c.model_dir;
    one.page_size = c.scheduler.page_size;
    cl.oneshot = one;
  } else if (auto ok = c.scheduler.validate(); !ok) {
    return std::unexpected(CliExit{2, "", "kvtierd: " + ok.error() + "\n"});
  }
  if (auto* config_opt = app.get_config_ptr(); config_opt && config_opt->count() > 0) {
    cl.config_file = config_opt->as<std::string>();
  }
  return cl;
}

}  // namespace kvtier::daemon
