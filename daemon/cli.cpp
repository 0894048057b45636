#include "daemon/cli.h"

#include <CLI/CLI.hpp>
#include <sstream>

namespace kvtier::daemon {

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
                 "(max-kv-tokens = 8192); command-line flags win");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--model", c.model_dir, "Model folder (config.json, model.safetensors)")
      ->check(CLI::ExistingDirectory)
      ->capture_default_str();
  app.add_option("--threads", c.threads, "Compute threads; 0 = OpenMP's default")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--page-size", c.scheduler.page_size, "Tokens per KV block")
      ->check(CLI::Range(1, 4096))
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

  namespace r = config_range;
  auto* server = app.add_option_group("server", "Serve requests on a Unix socket");
  server->add_option("--socket", c.socket_path, "Unix socket path (its folder is created)")
      ->capture_default_str();
  server->add_option("--max-kv-tokens", c.scheduler.max_kv_tokens, "KV positions resident at once")
      ->capture_default_str();
  server
      ->add_option("--max-batch-size", c.scheduler.max_batch_size,
                   "Requests admitted at once (runtime)")
      ->check(CLI::Range(1, r::kMaxBatchOrBudget))
      ->capture_default_str();
  server
      ->add_option("--token-budget", c.scheduler.token_budget, "Tokens per forward pass (runtime)")
      ->check(CLI::Range(1, r::kMaxBatchOrBudget))
      ->capture_default_str();
  server->add_option("--policy", policy, "Admission order: fcfs | priority (runtime)")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  server
      ->add_option("--max-line-bytes", c.max_line_bytes, "Longest request line accepted (runtime)")
      ->check(CLI::Range(r::kMinLineBytes, r::kMaxLineBytes))
      ->capture_default_str();
  server
      ->add_option("--max-output-bytes", c.max_output_bytes,
                   "Reply bytes queued for a client before it is dropped")
      ->check(CLI::Range(r::kMinOutputBytes, r::kMaxOutputBytes))
      ->capture_default_str();
  server
      ->add_option("--max-pending", c.max_pending,
                   "Requests queued or running, all clients (runtime)")
      ->check(CLI::Range(1, r::kMaxPending))
      ->capture_default_str();
  server->add_option("--max-connections", c.max_connections, "Connections served at once")
      ->check(CLI::Range(1, r::kMaxConnections))
      ->capture_default_str();
  server
      ->add_option("--drain-timeout", c.drain_timeout,
                   "Seconds running requests may finish in when stopping, then they are "
                   "cancelled; 0 = cancel at once (runtime)")
      ->check(CLI::Range(0.0, r::kMaxDrainSeconds))
      ->capture_default_str();
  server->add_option("--log-level", log_level, "error | warning | info | debug (runtime)")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  server->add_option("--socket-group", c.socket_group,
                     "Group the socket file is given to (mode 0660); default: the daemon's");
  server->add_flag("--allow-any-uid", c.allow_any_uid,
                   "Let every client that can connect make privileged calls (shutdown, "
                   "config.set); default: only the daemon's uid and root");

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
      exit.err = "kvtierd: unknown setting '" + what.substr(prefix.size()) +
                 "' in the config file (its keys are the long flag names: see --help)\n";
      return std::unexpected(exit);
    }
    std::ostringstream out, err;
    exit.code = app.exit(e, out, err);
    exit.out = out.str();
    exit.err = err.str();
    return std::unexpected(exit);
  }

  // IsMember checked both names, so these cannot fail.
  c.scheduler.policy = parse_policy(policy).value_or(c.scheduler.policy);
  c.log_level = log_level_parse(log_level).value_or(c.log_level);
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
