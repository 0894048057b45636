// `kvtierctl chat`: a conversation with the daemon's model, turn by turn, as
// nanochat's chat CLI holds one (scripts/chat_cli.py): each line read is the
// user's turn, the whole conversation so far goes out as `generate`'s
// "messages" (the daemon renders it in the model's chat format,
// wire/chat_template.h), and the answer streams back and joins it. Earlier
// turns are the prefix of every later request, so they come from the cache.
//
// Lines "clear" (a new conversation) and "quit" or "exit" (or the end of
// input) are commands, as in nanochat's CLI. With --prompt it answers that
// one message and exits. Defaults are nanochat's CLI's: temperature 0.6,
// top_k 50, max_tokens 256.
#pragma once

#include <cstdint>
#include <expected>
#include <istream>
#include <optional>
#include <ostream>
#include <string>

#include "ctl/rpc_client.h"

namespace kvtier::ctl {

struct ChatArgs {
  std::optional<std::string> prompt;  // one turn, then exit
  std::optional<std::string> system;  // a system message that opens the conversation
  int max_tokens = 256;
  double temperature = 0.6;
  int top_k = 50;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> cache_salt;
  bool stats = false;     // each answer's prompt and cached tokens, by tier, on stderr
  bool no_tools = false;  // leave the model's own tool calls unanswered (tool_choice "none")
};

// Runs the conversation: prompts ("User: ") and answers on `out`, turns read
// from `in`. A turn the daemon refuses (a conversation grown past the
// model's context) is said on stderr and left out of the conversation,
// which goes on; with --prompt, or when the daemon cannot be reached, the
// failure ends it.
std::expected<void, CallFailure> run_chat(RpcClient& client, const ChatArgs& args, std::istream& in,
                                          std::ostream& out);

}  // namespace kvtier::ctl
