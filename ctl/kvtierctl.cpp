// kvtierctl: the command-line client of kvtierd (docs/protocol.md).
//
// The socket: --socket, else $KVTIER_SOCKET, else kvtierd's own default
// ($XDG_RUNTIME_DIR/kvtier/kvtierd.sock, or /run/kvtier/kvtierd.sock).
// Every failure is one line on stderr, starting "kvtierctl: ", and the exit
// code says which kind it was (kExit* below, and --help).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ctl/cache_commands.h"
#include "ctl/rpc_client.h"
#include "ctl/top.h"

namespace {

using kvtier::ctl::CallFailure;
using kvtier::ctl::RpcClient;
using nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;        // bad command line
constexpr int kExitUnreachable = 3;  // no daemon at the socket, or it broke the connection
constexpr int kExitRpcError = 4;     // the daemon answered with a JSON-RPC error

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 2 usage error, 3 kvtierd unreachable (or it broke the connection),\n"
    "4 kvtierd answered the request with an error.\n"
    "The socket: --socket, else $KVTIER_SOCKET, else $XDG_RUNTIME_DIR/kvtier/kvtierd.sock\n"
    "(/run/kvtier/kvtierd.sock without XDG_RUNTIME_DIR).";

std::string default_socket_path() {
  if (const char* s = std::getenv("KVTIER_SOCKET"); s && *s) return s;
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && *runtime) {
    return std::string(runtime) + "/kvtier/kvtierd.sock";
  }
  return "/run/kvtier/kvtierd.sock";
}

int fail(const CallFailure& f) {
  std::fprintf(stderr, "kvtierctl: %s\n", f.message.c_str());
  return f.kind == CallFailure::kRpcError ? kExitRpcError : kExitUnreachable;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct GenerateArgs {
  std::string prompt;
  int max_tokens = 64;
  double temperature = 0.8;
  int top_k = 0;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  int priority = 0;
  int samples = 1;
  std::string cache_salt;
  std::string eviction;
  bool stream = false;
  bool json_out = false;
};

int run_generate(RpcClient& client, const GenerateArgs& a) {
  json params = {{"prompt", a.prompt},
                 {"max_tokens", a.max_tokens},
                 {"temperature", a.temperature},
                 {"top_k", a.top_k},
                 {"top_p", a.top_p},
                 {"seed", a.seed},
                 {"priority", a.priority},
                 {"n", a.samples},
                 {"stream", a.stream}};
  if (!a.stop.empty()) params["stop"] = a.stop;
  if (!a.cache_salt.empty()) params["cache_salt"] = a.cache_salt;
  if (!a.eviction.empty()) params["eviction"] = a.eviction;
  // Text mode streams sample 0 live; with several samples the others are
  // printed whole at the end, as interleaved text would be unreadable.
  if (a.stream && !a.json_out) std::cout << a.prompt << std::flush;
  auto result = client.call("generate", params, [&](const json& n) {
    if (a.json_out) {
      std::cout << dump(n) << std::endl;
    } else if (n.value("method", "") == "generate.token" && n["params"].value("sample", 0) == 0) {
      std::cout << n["params"].value("text", "") << std::flush;
    }
  });
  if (!result) {
    if (a.stream && !a.json_out) std::cout << std::endl;
    return fail(result.error());
  }
  if (a.json_out) {
    std::cout << dump(*result) << std::endl;
    return kExitOk;
  }
  if (!a.stream) std::cout << a.prompt << result->value("text", "");
  std::cout << std::endl;
  const json samples = result->value("samples", json::array());
  for (std::size_t i = 1; i < samples.size(); ++i) {
    std::cout << "--- sample " << i << " ---\n"
              << a.prompt << samples[i].value("text", "") << std::endl;
  }
  const json cached = result->value("cached_tokens", json::object());
  std::fprintf(stderr,
               "[%d prompt tokens (cached: l1 %d, l2 %d, l3 %d, remote %d), %d generated, "
               "finish: %s, %.1f ms]\n",
               result->value("prompt_tokens", 0), cached.value("l1", 0), cached.value("l2", 0),
               cached.value("l3", 0), cached.value("remote", 0),
               result->value("completion_tokens", 0),
               result->value("finish_reason", std::string("?")).c_str(),
               (*result)["timings"].value("total_ms", 0.0));
  return kExitOk;
}

int run_simple(RpcClient& client, const std::string& method, bool json_out) {
  auto result = client.call(method, json::object());
  if (!result) return fail(result.error());
  if (json_out || !result->is_object() || method == "health") {
    std::cout << result->dump(json_out ? -1 : 2) << "\n";
  } else {
    for (const auto& [key, value] : result->items())
      std::cout << key << ": " << dump(value) << "\n";
  }
  return kExitOk;
}

// Settings as the daemon names them: `token-budget` and `token_budget` both work.
std::string setting_name(std::string name) {
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

int run_config_get(RpcClient& client, const std::vector<std::string>& names, bool json_out) {
  auto result = client.call("config.get", json::object());
  if (!result) return fail(result.error());
  json shown = json::object();
  for (const std::string& raw : names) {
    const std::string name = setting_name(raw);
    if (!result->contains(name)) {
      return fail({CallFailure::kRpcError, "no setting named '" + name + "' (see config get)"});
    }
    shown[name] = (*result)[name];
  }
  if (names.empty()) shown = *result;
  if (json_out) {
    std::cout << dump(shown) << "\n";
    return kExitOk;
  }
  for (const auto& [name, entry] : shown.items()) {
    const json& v = entry["value"];
    std::printf("%-18s %-30s %s\n", name.c_str(),
                (v.is_string() ? v.get<std::string>() : dump(v)).c_str(),
                entry.value("runtime", false) ? "runtime" : "restart to change");
  }
  return kExitOk;
}

int run_config_set(RpcClient& client, const std::vector<std::string>& pairs) {
  json changes = json::object();
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    // A value that reads as JSON is sent as such (32, 0.5, true); anything
    // else as a string (priority, debug).
    json value = json::parse(pairs[i + 1], nullptr, false);
    if (value.is_discarded()) value = pairs[i + 1];
    changes[setting_name(pairs[i])] = value;
  }
  auto result = client.call("config.set", changes);
  if (!result) return fail(result.error());
  const json changed = result->value("changed", json::object());
  if (changed.empty()) std::cout << "nothing changed\n";
  for (const auto& [name, value] : changed.items())
    std::cout << name << " = " << dump(value) << "\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtierctl: talk to kvtierd over its Unix socket"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  std::string socket_path = default_socket_path();
  app.add_option("--socket", socket_path, "kvtierd's socket (env KVTIER_SOCKET)")
      ->capture_default_str();

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "Generate a continuation of a prompt");
  gen->add_option("--prompt", g.prompt, "Prompt text")->required();
  gen->add_option("--max-tokens", g.max_tokens, "Tokens to generate at most")
      ->capture_default_str();
  gen->add_option("--temperature", g.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  gen->add_option("--top-k", g.top_k, "Keep the k most likely tokens; 0 = all")
      ->capture_default_str();
  gen->add_option("--top-p", g.top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  gen->add_option("--seed", g.seed, "Seed of the request's random stream")->capture_default_str();
  gen->add_option("--stop", g.stop, "Stop at this text (repeatable)");
  gen->add_option("--priority", g.priority, "0 = most urgent (policy priority)")
      ->capture_default_str();
  gen->add_option("-n,--samples", g.samples, "Samples from one prefill (the protocol's n)")
      ->capture_default_str();
  gen->add_option("--cache-salt", g.cache_salt,
                  "Prefix-cache namespace: shares cached blocks only with the same salt");
  gen->add_option("--eviction", g.eviction,
                  "KV eviction policy (none, window:W, sinks:S,window:W, h2o:...); default: "
                  "the daemon's");
  gen->add_flag("--stream", g.stream, "Print text as it is generated (sample 0)");
  gen->add_flag("--json", g.json_out,
                "Print the raw JSON (notifications and result), one per line");

  bool json_out = false;
  auto* stats = app.add_subcommand("stats", "Scheduler and request counters");
  stats->add_flag("--json", json_out, "Print the raw JSON result");
  auto* health = app.add_subcommand("health", "Check that the daemon answers");
  health->add_flag("--json", json_out, "Print the raw JSON result");
  auto* shutdown = app.add_subcommand(
      "shutdown", "Stop the daemon: running requests may finish within its drain_timeout");

  auto* config = app.add_subcommand("config", "Read or change the daemon's settings");
  config->require_subcommand(1);
  std::vector<std::string> get_names;
  auto* config_get = config->add_subcommand("get", "Every setting (or those named) and its value");
  config_get->add_option("names", get_names, "Settings to show (default: all)");
  config_get->add_flag("--json", json_out, "Print the raw JSON result");
  std::vector<std::string> set_pairs;
  auto* config_set = config->add_subcommand(
      "set", "Change runtime settings, all or none: config set token_budget 32 policy priority");
  config_set->add_option("pairs", set_pairs, "NAME VALUE [NAME VALUE ...]")->required();

  auto* tiers = app.add_subcommand("tiers", "The prefix cache's tiers and load costs");
  tiers->add_flag("--json", json_out, "Print the raw JSON result");

  auto* cache = app.add_subcommand("cache", "Look at and steer the prefix cache");
  cache->require_subcommand(1);
  kvtier::ctl::CachePrompt cache_prompt;
  std::vector<CLI::App*> prompt_commands;
  for (const auto& [name, summary] : std::vector<std::pair<const char*, const char*>>{
           {"lookup", "How many of a prompt's tokens are cached, and in which tier"},
           {"warm", "Prefill a prompt into the cache without generating"},
           {"pin", "Keep a prompt's cached prefix from being dropped (privileged)"},
           {"unpin", "Undo a pin (privileged)"}}) {
    auto* sub = cache->add_subcommand(name, summary);
    auto* text = sub->add_option("prompt", cache_prompt.text, "Prompt text");
    auto* ids = sub->add_option("--tokens", cache_prompt.tokens, "Token ids instead: 1,2,3")
                    ->delimiter(',');
    text->excludes(ids);
    sub->add_option("--cache-salt", cache_prompt.cache_salt, "Prefix-cache namespace");
    sub->add_flag("--json", json_out, "Print the raw JSON result");
    prompt_commands.push_back(sub);
  }
  auto* cache_tree = cache->add_subcommand("tree", "A summary of the radix tree per tier");
  cache_tree->add_flag("--json", json_out, "Print the raw JSON result");
  std::string flush_tier;
  auto* cache_flush =
      cache->add_subcommand("flush",
                            "Drop what a tier may drop: l1 (down to l2), l2, l3, remote (forgotten "
                            "here, kept in Redis for the fleet), all");
  cache_flush->add_option("tier", flush_tier, "l1 | l2 | l3 | remote | all")
      ->required()
      ->check(CLI::IsMember({"l1", "l2", "l3", "remote", "all"}));
  cache_flush->add_flag("--json", json_out, "Print the raw JSON result");

  bool once = false;
  double interval = 1.0;
  auto* top = app.add_subcommand("top", "Live view of requests, batch and KV use");
  top->add_flag("--once", once, "Print one frame and exit");
  top->add_option("--interval", interval, "Seconds between frames")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
    if (config_set->parsed() && set_pairs.size() % 2 != 0) {
      throw CLI::ValidationError("config set", "takes NAME VALUE pairs");
    }
    for (CLI::App* sub : prompt_commands) {
      if (sub->parsed() && cache_prompt.text.empty() && cache_prompt.tokens.empty()) {
        throw CLI::ValidationError("cache " + sub->get_name(), "give a prompt or --tokens");
      }
    }
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  auto client = RpcClient::connect(socket_path);
  if (!client) return fail(client.error());
  if (gen->parsed()) return run_generate(*client, g);
  if (stats->parsed()) return run_simple(*client, "stats", json_out);
  if (health->parsed()) return run_simple(*client, "health", json_out);
  if (shutdown->parsed()) return run_simple(*client, "shutdown", false);
  if (config_get->parsed()) return run_config_get(*client, get_names, json_out);
  if (config_set->parsed()) return run_config_set(*client, set_pairs);
  auto done = [](const std::expected<void, CallFailure>& ok) {
    return ok ? kExitOk : fail(ok.error());
  };
  if (tiers->parsed()) return done(kvtier::ctl::run_tiers(*client, json_out));
  for (CLI::App* sub : prompt_commands) {
    if (sub->parsed()) {
      return done(kvtier::ctl::run_cache_prompt(*client, "cache." + sub->get_name(), cache_prompt,
                                                json_out));
    }
  }
  if (cache_tree->parsed()) return done(kvtier::ctl::run_cache_tree(*client, json_out));
  if (cache_flush->parsed()) {
    return done(kvtier::ctl::run_cache_flush(*client, flush_tier, json_out));
  }
  if (top->parsed()) {
    auto ok = kvtier::ctl::top_run(*client, once, interval);
    return ok ? kExitOk : fail(ok.error());
  }
  return kExitUsage;
}
