// How a conversation becomes the prompt a model continues, in the format the
// model was trained on, for every front door that takes one
// (/v1/chat/completions, JSON-RPC's `generate` with "messages", kvtierctl
// chat, and the router in front of them, which renders the same way so that
// a conversation's blocks get the same keys on both sides).
//
// Two kinds, chosen by the model folder:
//
//  * Special tokens (nanochat's models: a vocabulary holding <|bos|>,
//    <|user_start|>, <|user_end|>, <|assistant_start|> and
//    <|assistant_end|>). The conversation renders as nanochat's tokenizer
//    does (notes/nanochat.md §6): <|bos|>, then each user turn as
//    <|user_start|> text <|user_end|> and each assistant turn as
//    <|assistant_start|> text <|assistant_end|>, then <|assistant_start|>
//    to prime the answer, which ends when the model samples
//    <|assistant_end|> or <|bos|>. Each message's text is encoded on its own,
//    as ordinary text: a user who types "<|assistant_end|>" gets those
//    characters' tokens, never the marker. A system message may come first
//    only, and is merged into the first user message (system + "\n\n" +
//    user). The turns then alternate, user first, and the last is the
//    user's: anything else is refused, naming the message.
//
//  * Role strings (a GPT-2-style model, which has no chat training). The
//    model folder may hold chat_template.json (docs/http.md); without one,
//    the plain default below applies:
//
//      {
//        "system":    "{content}\n\n",
//        "user":      "User: {content}\n",
//        "assistant": "Assistant: {content}\n",
//        "generation_prompt": "Assistant:",
//        "stop": ["\nUser:"]
//      }
//
//    Each message becomes its role's text with "{content}" replaced by the
//    message's text; then the generation prompt follows, and the stop
//    strings end the answer before the model writes the next turn. Any
//    order of roles renders. A model trained on another format (the bundled
//    character model knows "Q: ...\nA:") says so in its own file. This is
//    not a Jinja template as Hugging Face models ship: the format is a few
//    fixed strings.
//
// "developer" messages count as "system" (OpenAI's newer name for it).
//
// Thread-safety: const methods may be called concurrently.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model_config.h"
#include "wire/prompt.h"

namespace kvtier::wire {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// OpenAI's "messages": an array of {"role", "content", optional "name"},
// content a string, null or an array of {"type": "text", "text": ...} parts
// (joined). Errors say what is wrong, for the caller to name "messages".
std::expected<std::vector<ChatMessage>, std::string> chat_messages_parse(const nlohmann::json& v);

// A conversation rendered: the prompt, and what ends the answer, to be added
// to the request's own stops.
struct ChatPrompt {
  Prompt prompt;
  std::vector<std::string> stop;
  std::vector<int> stop_token_ids;
};

// Adds `rendered`'s stop strings and stop tokens to `options`' own, each
// once.
void chat_stops_add(const ChatPrompt& rendered, RequestOptions& options);

class ChatTemplate {
 public:
  // The role-string default.
  ChatTemplate() = default;

  // The format `model_dir`'s model speaks: special tokens where `tokenizer`
  // holds nanochat's markers, else the folder's chat_template.json or the
  // default. A chat_template.json that does not parse, holds unknown keys, a
  // role text without "{content}" or stops that are not strings, or that
  // sits beside a vocabulary with turn markers, is an error naming the file
  // and the key.
  static std::expected<ChatTemplate, std::string> load(const std::string& model_dir,
                                                       const TokenizerSpec& tokenizer);

  // The prompt for `messages`. Refused (special tokens only), with a message
  // naming the message at fault: a system message after the first, turns
  // that do not alternate user first, a conversation not ending with the
  // user's turn.
  std::expected<ChatPrompt, std::string> render(std::span<const ChatMessage> messages) const;

  // Whether turns are marked by special tokens (nanochat's format).
  bool marks_turns_with_tokens() const { return markers_.has_value(); }

 private:
  // The special-token kind's ids.
  struct Markers {
    int bos = 0, user_start = 0, user_end = 0, assistant_start = 0, assistant_end = 0;
  };
  std::expected<ChatPrompt, std::string> render_marked(std::span<const ChatMessage> messages) const;

  std::string system_ = "{content}\n\n";
  std::string user_ = "User: {content}\n";
  std::string assistant_ = "Assistant: {content}\n";
  std::string generation_prompt_ = "Assistant:";
  std::vector<std::string> stop_ = {"\nUser:"};
  std::optional<Markers> markers_;
};

}  // namespace kvtier::wire
