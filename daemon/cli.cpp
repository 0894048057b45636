#include "daemon/cli.h"

#include <CLI/CLI.hpp>
#include <set>
#include <string>

#include "daemon/config_file.h"
#include "daemon/setting_flags.h"
#include "engine/build_info.h"

namespace kvtier::daemon {

using wire::cli_parse_failure;
using wire::CliExit;
using wire::kExitConfig;

namespace {

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
  oneshot->add_option("--seed", one.seed,
                      "Seed of this request's random stream [default: a random one, printed "
                      "after the text]");
  oneshot->add_option("--stop", one.stop, "Stop when this text appears (repeatable)");
  oneshot
      ->add_option("--prefill-chunk", one.prefill_chunk, "Prompt tokens per prefill step; 0 = all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return prompt_opt;
}

CliExit bad_config(const std::string& why) { return {kExitConfig, "", why}; }

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
  app.add_option("--config", cl.config_file,
                 "Read settings from this TOML file: keys are the long flag names "
                 "(max-kv-tokens = 8192); command-line flags win")
      ->type_name("FILE")
      ->check(CLI::Validator(config_file_check, ""));
  app.add_flag("--check-config", cl.check_only,
               "Check the settings (flags and --config file) and exit: 0 when they are valid, "
               "78 when not. Starts nothing; what the machine allows is checked at start");
  app.set_version_flag("--version", version_text("kvtierd"), "Print the version and exit");
  // Before the settings' groups, so that --help lists it first.
  CLI::Option* prompt_opt = oneshot_flags_add(app, one);
  SettingFlags flags(app, defaults);

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return std::unexpected(cli_parse_failure(app, e));
  }

  // The file's settings first: the command line's, stored after them, win.
  std::set<std::string> from_file;
  if (!cl.config_file.empty()) {
    auto given = config_file_apply(cl.config_file, c);
    if (!given) return std::unexpected(bad_config(given.error()));
    from_file.insert(given->begin(), given->end());
  }
  if (auto ok = flags.apply(c); !ok) return std::unexpected(bad_config(ok.error()));
  const auto given = [&](const char* name) {
    return flags.given(name) || from_file.contains(name);
  };
  if (auto ok = tiers_resolve(c.scheduler, given("preemption"), given("l2_bytes")); !ok)
    return std::unexpected(bad_config(ok.error()));
  if (prompt_opt->count() > 0) {
    // One generation runs the engine path without the device layer: the CPU.
    if (c.device == "cuda") {
      return std::unexpected(
          bad_config("--device cuda: one-shot generation (--prompt) runs on the CPU; serve with "
                     "--device cuda and generate with `kvtierctl generate`"));
    }
    one.model_dir = c.model_dir;
    one.page_size = c.scheduler.page_size;
    cl.oneshot = one;
  } else if (auto ok = c.scheduler.validate(); !ok) {
    return std::unexpected(bad_config(ok.error()));
  }
  return cl;
}

}  // namespace kvtier::daemon
