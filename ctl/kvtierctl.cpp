// kvtierctl: the command-line client of kvtierd.
//
// Exit codes: 0 ok; 1 the daemon answered with an error; 2 usage error;
// 3 the daemon could not be reached (or broke the connection).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ctl/rpc_client.h"

namespace {

using kvtier::ctl::CallFailure;
using kvtier::ctl::RpcClient;
using nlohmann::json;

constexpr int kExitRpcError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

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

struct GenerateArgs {
  std::string prompt;
  int max_tokens = 64;
  double temperature = 0.8;
  std::uint64_t seed = 0;
  bool stream = false;
  bool json_out = false;
};

int run_generate(RpcClient& client, const GenerateArgs& a) {
  json params = {{"prompt", a.prompt},
                 {"max_tokens", a.max_tokens},
                 {"temperature", a.temperature},
                 {"seed", a.seed},
                 {"stream", a.stream}};
  if (a.stream && !a.json_out) std::cout << a.prompt << std::flush;
  auto result = client.call("generate", params, [&](const json& n) {
    if (a.json_out) {
      std::cout << n.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    } else if (n.value("method", "") == "generate.token") {
      std::cout << n["params"].value("text", "") << std::flush;
    }
  });
  if (!result) {
    if (a.stream && !a.json_out) std::cout << std::endl;
    return fail(result.error());
  }
  if (a.json_out) {
    std::cout << result->dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    return 0;
  }
  if (!a.stream) std::cout << a.prompt << result->value("text", "");
  std::cout << std::endl;
  std::fprintf(stderr, "[%d prompt tokens, %d generated, finish: %s, %.1f ms]\n",
               result->value("prompt_tokens", 0), result->value("completion_tokens", 0),
               result->value("finish_reason", std::string("?")).c_str(),
               (*result)["timings"].value("total_ms", 0.0));
  return 0;
}

int run_simple(RpcClient& client, const std::string& method) {
  auto result = client.call(method, json::object());
  if (!result) return fail(result.error());
  if (result->is_object() && method != "health") {
    for (const auto& [key, value] : result->items())
      std::cout << key << ": " << value.dump() << "\n";
  } else {
    std::cout << result->dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtierctl: talk to kvtierd over its Unix socket"};
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
  gen->add_option("--seed", g.seed, "Seed of the request's random stream")->capture_default_str();
  gen->add_flag("--stream", g.stream, "Print text as it is generated");
  gen->add_flag("--json", g.json_out,
                "Print the raw JSON (notifications and result), one per line");
  auto* stats = app.add_subcommand("stats", "Scheduler and request counters");
  auto* health = app.add_subcommand("health", "Check that the daemon answers");
  auto* shutdown =
      app.add_subcommand("shutdown", "Stop the daemon (running requests are cancelled)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  auto client = RpcClient::connect(socket_path);
  if (!client) return fail(client.error());
  if (gen->parsed()) return run_generate(*client, g);
  if (stats->parsed()) return run_simple(*client, "stats");
  if (health->parsed()) return run_simple(*client, "health");
  if (shutdown->parsed()) return run_simple(*client, "shutdown");
  return kExitUsage;
}
