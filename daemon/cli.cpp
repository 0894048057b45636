#include "daemon/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "daemon/setting_flags.h"

namespace kvtier::daemon {

namespace {

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
// name without the cache is an error rather than ignored. The default
// eviction policy must suit page_size.
std::expected<void, std::string> tiers_resolve(SchedulerConfig& s, bool preemption_given,
                                               bool l2_given) {
  if (!preemption_given) {
    s.preemption = s.prefix_cache ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
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
  if (auto ok = s.eviction.validate(s.page_size); !ok) {
    return std::unexpected("--eviction: " + ok.error());
  }
  return {};
}

// The one-shot flags, which are a request's, not settings. Returns --prompt,
// whose presence asks for one generation.
CLI::Option* oneshot_flags_add(CLI::App& app, OneShotOptions& one) {
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
  return prompt_opt;
}

// What a parse error tells the user.
CliExit parse_failure(const CLI::App& app, const CLI::ParseError& e) {
  CliExit exit;
  // CLI11 words an unknown config key as "INI was not able to parse KEY",
  // even for TOML; say what is wrong instead.
  const std::string what = e.what();
  const std::string prefix = "INI was not able to parse ";
  if (dynamic_cast<const CLI::ConfigError*>(&e) && what.starts_with(prefix)) {
    exit.code = e.get_exit_code();
    exit.err = "kvtierd: unknown setting '" + printable(what.substr(prefix.size())) +
               "' in the config file (its keys are the long flag names: see --help)\n";
    return exit;
  }
  std::ostringstream out, err;
  exit.code = app.exit(e, out, err);
  exit.out = out.str();
  exit.err = err.str();
  return exit;
}

}  // namespace

std::expected<CommandLine, CliExit> cli_parse(const std::vector<std::string>& args,
                                              const DaemonConfig& defaults) {
  CommandLine cl;
  cl.config = defaults;
  DaemonConfig& c = cl.config;
  OneShotOptions one;

  CLI::App app{
      "kvtierd: KV-cache tiering inference daemon.\n"
      "Serves JSON-RPC on a Unix socket; with --prompt, generates once and exits.\n"
      "Settings marked (runtime) change without a restart: `kvtierctl config set`, or edit\n"
      "the --config file and send SIGHUP. A SIZE is bytes, or a number with a suffix in\n"
      "powers of 1024 (256M, 4GiB)."};
  app.set_config("--config", "",
                 "Read settings from this TOML/INI file: keys are the long flag names "
                 "(max-kv-tokens = 8192); command-line flags win")
      ->type_name("FILE")
      ->check(CLI::Validator(config_file_check, ""));
  app.allow_config_extras(CLI::config_extras_mode::error);
  // Before the settings' groups, so that --help lists it first.
  CLI::Option* prompt_opt = oneshot_flags_add(app, one);
  SettingFlags flags(app, defaults);

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return std::unexpected(parse_failure(app, e));
  }

  if (auto ok = flags.apply(c); !ok) {
    return std::unexpected(CliExit{2, "", "kvtierd: " + ok.error() + "\n"});
  }
  if (auto ok = tiers_resolve(c.scheduler, flags.given("preemption"), flags.given("l2_bytes"));
      !ok) {
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
