// kvtierctl: the command-line client of kvtierd (docs/protocol.md).
//
// The socket: -s/--socket, else $KVTIER_SOCKET, else the user's own
// daemon's or the service's, whichever is there (socket_choice.h).
// Every failure, a usage error included, is one line on stderr, starting
// "kvtierctl: ", and the exit code says which kind it was (kExit* below,
// and --help). Every command takes --json: its raw result on one line.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "ctl/cache_commands.h"
#include "ctl/chat_command.h"
#include "ctl/generate_command.h"
#include "ctl/rpc_client.h"
#include "ctl/socket_choice.h"
#include "ctl/status_text.h"
#include "ctl/top.h"
#include "engine/build_info.h"
#include "engine/cache/tier.h"

namespace {

using kvtier::ctl::CallFailure;
using kvtier::ctl::GenerateArgs;
using kvtier::ctl::RpcClient;
using nlohmann::json;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;        // bad command line
constexpr int kExitUnreachable = 3;  // no daemon at the socket, or it broke the connection
constexpr int kExitRpcError = 4;     // the daemon answered with a JSON-RPC error
constexpr int kExitUnhealthy = 5;    // `health` answered, but not "ok"

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 ok, 2 usage error, 3 kvtierd unreachable (or it broke the connection),\n"
    "4 kvtierd answered the request with an error, 5 `health` answered but not ok (a router\n"
    "with no usable daemon, or one draining).\n"
    "The socket: -s/--socket, else $KVTIER_SOCKET, else $XDG_RUNTIME_DIR/kvtier/kvtierd.sock\n"
    "(a daemon of your own) when it exists, else /run/kvtier/kvtierd.sock (the service).";

int fail(const CallFailure& f) {
  std::fprintf(stderr, "kvtierctl: %s\n", f.message.c_str());
  return f.kind == CallFailure::kRpcError ? kExitRpcError : kExitUnreachable;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int done(const std::expected<void, CallFailure>& ok) { return ok ? kExitOk : fail(ok.error()); }

// Calls `method` and prints its result: raw on one line with json_out, else
// as `text` makes it.
int run_method(RpcClient& client, const std::string& method, const json& params, bool json_out,
               const std::function<std::string(const json&)>& text) {
  auto result = client.call(method, params);
  if (!result) return fail(result.error());
  std::cout << (json_out ? dump(*result) + "\n" : text(*result));
  return kExitOk;
}

// `health`: printed as run_method does; a status other than "ok" (a
// router with no usable daemon, or one draining) exits kExitUnhealthy, so
// `kvtierctl health || ...` works as a check.
int run_health(RpcClient& client, bool json_out) {
  auto result = client.call("health", json::object());
  if (!result) return fail(result.error());
  std::cout << (json_out ? dump(*result) + "\n" : kvtier::ctl::health_text(*result));
  return result->value("status", json()) == "ok" ? kExitOk : kExitUnhealthy;
}

// `call METHOD [PARAMS]`: any method, its notifications and result as JSON.
int run_call(RpcClient& client, const std::string& method, const json& params, bool json_out) {
  auto result =
      client.call(method, params, [](const json& n) { std::cout << dump(n) << std::endl; });
  if (!result) return fail(result.error());
  std::cout << (json_out ? dump(*result)
                         : result->dump(2, ' ', false, json::error_handler_t::replace))
            << "\n";
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
    std::string value = v.is_string() ? v.get<std::string>() : dump(v);
    // A value the daemon chose (0 = chosen at start): what it came to.
    if (entry.contains("chosen") && entry["chosen"] != v)
      value += " (" + dump(entry["chosen"]) + ")";
    std::printf("%-20s %-30s %s\n", name.c_str(), value.c_str(),
                entry.value("runtime", false) ? "runtime" : "restart to change");
  }
  // Why the chosen values are what they are, once.
  if (shown.contains("token_budget") && shown["token_budget"].contains("why"))
    std::printf("token budgets: %s\n", shown["token_budget"].value("why", "").c_str());
  return kExitOk;
}

int run_config_set(RpcClient& client, const std::vector<std::string>& pairs, bool json_out) {
  json changes = json::object();
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    // A value that reads as JSON is sent as such (32, 0.5, true); anything
    // else as a string (priority, debug).
    json value = json::parse(pairs[i + 1], nullptr, false);
    if (value.is_discarded()) value = pairs[i + 1];
    changes[setting_name(pairs[i])] = value;
  }
  return run_method(client, "config.set", changes, json_out, [](const json& r) {
    const json changed = r.value("changed", json::object());
    std::string out = changed.empty() ? "nothing changed\n" : "";
    for (const auto& [name, value] : changed.items()) out += name + " = " + dump(value) + "\n";
    return out;
  });
}

// A usage error as one line, pointing at the help of the (sub)command it
// was in: "kvtierctl: --max-tokens: ...; see kvtierctl generate --help".
int usage_error(const CLI::App& app, std::string message) {
  std::string command = "kvtierctl";
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    command += " " + at->get_name();
  }
  // CLI11 finds the subcommand missing before the word that was meant as one.
  if (!at->get_subcommands({}).empty() && !at->remaining().empty()) {
    message = "'" + at->remaining().front() + "' is not a command of " + command;
  }
  for (char& c : message) c = c == '\n' ? ' ' : c;
  std::fprintf(stderr, "kvtierctl: %s; see %s --help\n", message.c_str(), command.c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtierctl: talk to kvtierd over its Unix socket"};
  app.footer(kExitCodesHelp);
  app.set_version_flag("--version", kvtier::version_text("kvtierctl"),
                       "Print the version and exit");
  app.require_subcommand(1);
  const kvtier::ctl::SocketChoice found =
      kvtier::ctl::socket_choose(std::getenv("KVTIER_SOCKET"), std::getenv("XDG_RUNTIME_DIR"));
  std::string socket_path = found.path;
  auto* socket_option =
      app.add_option("-s,--socket", socket_path, "kvtierd's socket (env KVTIER_SOCKET)")
          ->capture_default_str();
  constexpr const char* kDaemons = "; default: the daemon's";
  auto daemons = [&](std::string text) { return text + kDaemons; };

  GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "Generate a continuation of a prompt");
  auto* prompt = gen->add_option("--prompt", g.prompt, "Prompt text");
  auto* prompt_file = gen->add_option("--prompt-file", g.prompt_file,
                                      "Read the prompt from this file (- = stdin); with no "
                                      "prompt given, it is read from stdin unless a terminal");
  auto* prompt_tokens =
      gen->add_option("--tokens", g.tokens, "Token ids as the prompt: 1,2,3")->delimiter(',');
  prompt->excludes(prompt_file)->excludes(prompt_tokens);
  prompt_file->excludes(prompt_tokens);
  gen->add_option("--max-tokens", g.max_tokens, daemons("Tokens to generate at most"));
  gen->add_option("--temperature", g.temperature, daemons("Sampling temperature; 0 = greedy"));
  gen->add_option("--top-k", g.top_k, daemons("Keep the k most likely tokens; 0 = all"));
  gen->add_option("--top-p", g.top_p, daemons("Nucleus sampling mass in (0, 1]"));
  gen->add_option("--seed", g.seed,
                  "Seed of the request's random stream; default: the daemon's, a random one "
                  "it reports (the closing line's `seed N`) for --seed to replay the run");
  gen->add_option("--stop", g.stop, "Stop at this text (repeatable)");
  gen->add_option("--priority", g.priority, daemons("0 = most urgent (policy priority)"));
  gen->add_option("-n,--samples", g.samples,
                  daemons("Samples from one prefill (the protocol's n)"));
  gen->add_option("--cache-salt", g.cache_salt,
                  "Prefix-cache namespace: shares cached blocks only with the same salt");
  gen->add_option("--eviction", g.eviction,
                  daemons("KV eviction policy (none, window:W, sinks:S,window:W, h2o:...)"));
  gen->add_flag("--stream", g.stream, "Print text as it is generated (sample 0)");
  gen->add_flag("--json", g.json_out,
                "Print the raw JSON (notifications and result), one per line");

  kvtier::ctl::ChatArgs chat_args;
  auto* chat = app.add_subcommand(
      "chat", "Talk with the model, turn by turn, in its chat format (nanochat's for its models)");
  chat->add_option("-p,--prompt", chat_args.prompt, "Answer this one message, then exit");
  chat->add_option("--system", chat_args.system, "A system message to open the conversation");
  chat->add_option("--max-tokens", chat_args.max_tokens, "Tokens per answer at most")
      ->capture_default_str();
  chat->add_option("--temperature", chat_args.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  chat->add_option("--top-k", chat_args.top_k, "Keep the k most likely tokens; 0 = all")
      ->capture_default_str();
  chat->add_option("--seed", chat_args.seed, "Seed of each answer's random stream");
  chat->add_option("--cache-salt", chat_args.cache_salt,
                   "Prefix-cache namespace: shares cached blocks only with the same salt");
  chat->add_flag("--no-tools", chat_args.no_tools,
                 "Leave the model's calculator calls unanswered (nanochat's tool)");
  chat->add_flag("--stats", chat_args.stats,
                 "After each answer, its prompt tokens and those the cache held, by tier "
                 "(stderr)");

  auto* stats = app.add_subcommand("stats", "Scheduler and request counters");
  auto* health = app.add_subcommand(
      "health", "Check that the daemon answers, on one line; exit 5 when it is not ok");
  auto* fleet = app.add_subcommand(
      "fleet", "kvtier-router's daemons, their load and index, and its choices (docs/fleet.md)");
  auto* shutdown = app.add_subcommand(
      "shutdown",
      "Stop the daemon (or kvtier-router): running requests may finish within its drain_timeout");
  std::uint64_t cancel_id = 0;
  auto* cancel = app.add_subcommand(
      "cancel", "Cancel a running generate: its answer ends with finish_reason cancelled");
  cancel
      ->add_option("id", cancel_id,
                   "The daemon's request id (the generate result's and notifications' id)")
      ->required();

  auto* config = app.add_subcommand("config", "Read or change the daemon's settings");
  config->require_subcommand(1);
  std::vector<std::string> get_names;
  auto* config_get = config->add_subcommand("get", "Every setting (or those named) and its value");
  config_get->add_option("names", get_names, "Settings to show (default: all)");
  std::vector<std::string> set_pairs;
  auto* config_set = config->add_subcommand(
      "set", "Change runtime settings, all or none: config set token_budget 32 policy priority");
  config_set->add_option("pairs", set_pairs, "NAME VALUE [NAME VALUE ...]")->required();

  auto* tiers = app.add_subcommand("tiers", "The prefix cache's tiers, hit rates and load costs");

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
    prompt_commands.push_back(sub);
  }
  auto* cache_tree = cache->add_subcommand("tree", "A summary of the radix tree per tier");
  std::string flush_tier;
  auto* cache_flush =
      cache->add_subcommand("flush",
                            "Drop what a tier may drop (L1's blocks move down a tier; a shared "
                            "tier's are forgotten here and kept for the fleet), or all tiers");
  std::vector<std::string> flushable;  // every tier's name, then "all"
  for (const kvtier::TierNames& t : kvtier::kTierNames) flushable.emplace_back(t.name);
  flushable.emplace_back("all");
  cache_flush->add_option("tier", flush_tier, "A tier's name (as `tiers` shows it) or all")
      ->required()
      ->check(CLI::IsMember(flushable));

  kvtier::ctl::TopOptions top_options;
  auto* top = app.add_subcommand("top", "Live view of requests, batch and KV use");
  top->add_flag("--once", top_options.once, "Print one frame and exit");
  top->add_option("--interval", top_options.interval_s,
                  "Seconds between frames (and between tries to reconnect)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();

  std::string call_method, call_params = "{}";
  auto* call = app.add_subcommand(
      "call", "Send any method, print its result as JSON: call cancel '{\"id\": 3}'");
  call->add_option("method", call_method, "The method (see: call help)")->required();
  call->add_option("params", call_params, "Its params as JSON")->capture_default_str();

  // --json on every command: the raw result, one line, for scripts.
  bool json_out = false;
  std::vector<CLI::App*> commands = {&app};
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const auto subs = commands[i]->get_subcommands([](CLI::App*) { return true; });
    commands.insert(commands.end(), subs.begin(), subs.end());
    if (subs.empty() && commands[i]->get_option_no_throw("--json") == nullptr) {
      commands[i]->add_flag("--json", json_out,
                            commands[i] == top ? "Each frame's stats and config as one JSON line"
                                               : "Print the raw JSON result on one line");
    }
  }

  json call_params_json;
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
    if (call->parsed()) {
      call_params_json = json::parse(call_params, nullptr, false);
      if (call_params_json.is_discarded())
        throw CLI::ValidationError("params", "not valid JSON: " + call_params);
    }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return usage_error(app, e.what());
  }
  if (gen->parsed()) {
    if (auto read = kvtier::ctl::generate_prompt_read(g); !read)
      return usage_error(app, read.error());
  }

  const bool searched = socket_option->count() == 0;
  if (searched && !found.note.empty()) std::fprintf(stderr, "kvtierctl: %s\n", found.note.c_str());
  if (top->parsed()) {
    top_options.json_out = json_out;
    return done(kvtier::ctl::top_run(socket_path, top_options));
  }
  auto client = RpcClient::connect(socket_path);
  if (!client) {
    CallFailure failure = client.error();
    if (searched && found.tried.size() > 1)
      failure.message += " (no socket at " + found.tried[1] + " either)";
    return fail(failure);
  }
  if (gen->parsed()) return done(kvtier::ctl::run_generate(*client, g));
  if (chat->parsed()) return done(kvtier::ctl::run_chat(*client, chat_args, std::cin, std::cout));
  if (stats->parsed()) {
    return run_method(*client, "stats", json::object(), json_out, kvtier::ctl::stats_text);
  }
  if (health->parsed()) return run_health(*client, json_out);
  if (fleet->parsed()) {
    return run_method(*client, "fleet", json::object(), json_out, kvtier::ctl::fleet_text);
  }
  if (shutdown->parsed()) {
    // kvtierd or kvtier-router, as the answer says (kvtierd's before it did
    // said nothing).
    return run_method(*client, "shutdown", json::object(), json_out, [](const json& r) {
      return r.value("program", std::string("kvtierd")) + " is stopping\n";
    });
  }
  if (cancel->parsed()) {
    return run_method(*client, "cancel", {{"id", cancel_id}}, json_out, [](const json& r) {
      return "cancelled request " + dump(r.value("cancelled", json())) + "\n";
    });
  }
  if (call->parsed()) return run_call(*client, call_method, call_params_json, json_out);
  if (config_get->parsed()) return run_config_get(*client, get_names, json_out);
  if (config_set->parsed()) return run_config_set(*client, set_pairs, json_out);
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
  return kExitUsage;
}
