// How /v1/chat/completions turns a conversation into the one prompt a
// GPT-2-style model continues. A model folder may hold chat_template.json
// (docs/http.md); without one, the plain default below applies:
//
//   {
//     "system":    "{content}\n\n",
//     "user":      "User: {content}\n",
//     "assistant": "Assistant: {content}\n",
//     "generation_prompt": "Assistant:",
//     "stop": ["\nUser:"]
//   }
//
// Each message becomes its role's text with "{content}" replaced by the
// message's text; then the generation prompt follows, and the stop strings
// are added to the request's own so that the model's answer ends before it
// writes the next turn. "developer" messages count as "system" (OpenAI's
// newer name for it). A model trained on another format (the bundled
// character model knows "Q: ...\nA:") says so in its own file.
//
// This is not a Jinja template as Hugging Face models ship: a GPT-2 model
// has no chat training, and the format is a few fixed strings.
#pragma once

#include <expected>
#include <string>
#include <vector>

namespace kvtier::daemon::http {

struct ChatTemplate {
  std::string system = "{content}\n\n";
  std::string user = "User: {content}\n";
  std::string assistant = "Assistant: {content}\n";
  std::string generation_prompt = "Assistant:";
  std::vector<std::string> stop = {"\nUser:"};

  // The model folder's chat_template.json, or the default when it has none.
  // A file that is there but does not parse, or holds unknown keys, a role
  // text without "{content}" or stops that are not strings, is an error
  // naming the file and the key.
  static std::expected<ChatTemplate, std::string> load(const std::string& model_dir);

  struct Message {
    std::string role;  // system | user | assistant
    std::string content;
  };
  // The prompt for `messages`.
  std::string render(const std::vector<Message>& messages) const;
};

}  // namespace kvtier::daemon::http
