#include "ctl/chat_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "ctl/status_text.h"

namespace kvtier::ctl {

using nlohmann::json;

namespace {

// Asks for one answer to `messages`, streaming it to `out`; its text.
std::expected<std::string, CallFailure> answer(RpcClient& client, const ChatArgs& a,
                                               const json& messages, std::ostream& out) {
  json params = {{"messages", messages},
                 {"max_tokens", a.max_tokens},
                 {"temperature", a.temperature},
                 {"top_k", a.top_k},
                 {"stream", true}};
  if (a.seed) params["seed"] = *a.seed;
  if (a.cache_salt) params["cache_salt"] = *a.cache_salt;
  if (a.no_tools) params["tool_choice"] = "none";
  auto result = client.call("generate", params, [&](const json& n) {
    if (n.value("method", "") == "generate.token")
      out << n["params"].value("text", "") << std::flush;
  });
  out << "\n" << std::flush;  // before the stats line on stderr
  if (!result) return std::unexpected(result.error());
  if (a.stats) {
    std::fprintf(stderr, "[%d prompt tokens (cached: %s), %d generated, finish: %s]\n",
                 result->value("prompt_tokens", 0), cached_tokens_text(*result).c_str(),
                 result->value("completion_tokens", 0),
                 result->value("finish_reason", std::string("?")).c_str());
  }
  return result->value("text", "");
}

}  // namespace

std::expected<void, CallFailure> run_chat(RpcClient& client, const ChatArgs& a, std::istream& in,
                                          std::ostream& out) {
  const json opening =
      a.system ? json::array({{{"role", "system"}, {"content", *a.system}}}) : json::array();
  json messages = opening;
  const auto turn = [&](const std::string& text) -> std::expected<void, CallFailure> {
    messages.push_back({{"role", "user"}, {"content", text}});
    out << "Assistant: " << std::flush;
    auto reply = answer(client, a, messages, out);
    if (!reply) {
      messages.erase(messages.end() - 1);
      return std::unexpected(reply.error());
    }
    messages.push_back({{"role", "assistant"}, {"content", *reply}});
    return {};
  };
  if (a.prompt) return turn(*a.prompt);

  out << "kvtierctl chat: 'clear' starts a new conversation, 'quit' or the end of input ends it\n";
  std::string line;
  while (true) {
    out << "\nUser: " << std::flush;
    if (!std::getline(in, line)) break;
    if (line == "quit" || line == "exit") break;
    if (line == "clear") {
      messages = opening;
      out << "(a new conversation)\n";
      continue;
    }
    if (line.empty()) continue;
    auto ok = turn(line);
    // A turn the daemon refuses (a conversation past the model's context)
    // is not the end of the session; a daemon gone is.
    if (!ok && ok.error().kind != CallFailure::kRpcError) return ok;
    if (!ok)
      std::fprintf(stderr, "kvtierctl: %s ('clear' starts a new conversation)\n",
                   ok.error().message.c_str());
  }
  out << "\n";
  return {};
}

}  // namespace kvtier::ctl
