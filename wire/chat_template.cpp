#include "wire/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "wire/protocol.h"

namespace kvtier::wire {

namespace {

using nlohmann::json;

// A chat template is a few short strings; anything larger is not one.
constexpr std::uintmax_t kMaxTemplateBytes = 64 << 10;

std::string with_content(const std::string& role_text, const std::string& content) {
  const std::size_t at = role_text.find("{content}");
  return role_text.substr(0, at) + content + role_text.substr(at + 9);
}

// A message's text: a string, null, or an array of {"type": "text", "text":
// ...} parts (OpenAI's newer form), joined.
std::expected<std::string, std::string> message_text(const json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  const std::string usage =
      "a message's 'content' must be a string or an array of "
      "{\"type\": \"text\", \"text\": ...} parts (text only)";
  if (!content.is_array()) return std::unexpected(usage);
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return std::unexpected(usage);
    text += part["text"].get<std::string>();
  }
  return text;
}

// "message 3 (assistant)": how a refusal names a message, counting from 1.
std::string named(std::size_t index, const ChatMessage& m) {
  return "message " + std::to_string(index + 1) + " (" + m.role + ")";
}

}  // namespace

std::expected<std::vector<ChatMessage>, std::string> chat_messages_parse(const json& v) {
  if (!v.is_array() || v.empty()) return std::unexpected("'messages' must be a non-empty array");
  std::vector<ChatMessage> out;
  for (const json& m : v) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return std::unexpected("each message must be an object with a 'role'");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      return std::unexpected(
          "a message's role must be system, developer, user or assistant, not '" + role + "'");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        return std::unexpected("a message takes 'role', 'content' and 'name', not '" + key + "'");
    auto text = message_text(m.contains("content") ? m["content"] : json(nullptr));
    if (!text) return std::unexpected(text.error());
    out.push_back({std::move(role), std::move(*text)});
  }
  return out;
}

void chat_stops_add(const ChatPrompt& rendered, RequestOptions& options) {
  const auto add = [](auto& to, const auto& from) {
    for (const auto& one : from)
      if (std::find(to.begin(), to.end(), one) == to.end()) to.push_back(one);
  };
  add(options.stop, rendered.stop);
  add(options.stop_token_ids, rendered.stop_token_ids);
}

std::expected<ChatTemplate, std::string> ChatTemplate::load(const std::string& model_dir,
                                                            const TokenizerSpec& tokenizer) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(model_dir) / "chat_template.json";
  const std::string where = path.string() + ": ";
  std::error_code ec;
  const bool have_file = fs::exists(path, ec);

  // nanochat's markers, all of them; a vocabulary with some only is not one
  // this format knows.
  const auto id = [&](std::string_view text) {
    return special_token_id(tokenizer.special_tokens, text);
  };
  const auto bos = id("<|bos|>"), user_start = id("<|user_start|>"), user_end = id("<|user_end|>"),
             assistant_start = id("<|assistant_start|>"), assistant_end = id("<|assistant_end|>");
  if (bos && user_start && user_end && assistant_start && assistant_end) {
    if (have_file)
      return std::unexpected(where +
                             "this model's vocabulary marks chat turns with special tokens "
                             "(<|user_start|>...), so it takes no chat template; remove the file");
    ChatTemplate t;
    t.markers_ = Markers{.bos = *bos,
                         .user_start = *user_start,
                         .user_end = *user_end,
                         .assistant_start = *assistant_start,
                         .assistant_end = *assistant_end};
    return t;
  }

  if (!have_file) return ChatTemplate{};
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) > kMaxTemplateBytes || ec)
    return std::unexpected(where + "not a regular file of at most 64 KiB");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto doc = json_parse(text.str());
  if (!doc || !doc->is_object())
    return std::unexpected(where + (doc ? std::string("not a JSON object") : doc.error().message));
  ChatTemplate t;
  for (const auto& [key, v] : doc->items()) {
    std::string* role = key == "system"              ? &t.system_
                        : key == "user"              ? &t.user_
                        : key == "assistant"         ? &t.assistant_
                        : key == "generation_prompt" ? &t.generation_prompt_
                                                     : nullptr;
    if (role != nullptr) {
      if (!v.is_string()) return std::unexpected(where + "'" + key + "' must be a string");
      *role = v.get<std::string>();
      if (key != "generation_prompt" && role->find("{content}") == std::string::npos)
        return std::unexpected(where + "'" + key + "' must hold {content}");
    } else if (key == "stop") {
      if (!v.is_array()) return std::unexpected(where + "'stop' must be an array of strings");
      t.stop_.clear();
      for (const auto& s : v) {
        if (!s.is_string()) return std::unexpected(where + "'stop' must be an array of strings");
        t.stop_.push_back(s.get<std::string>());
      }
    } else {
      return std::unexpected(where + "unknown key '" + key +
                             "' (system, user, assistant, generation_prompt, stop)");
    }
  }
  return t;
}

std::expected<ChatPrompt, std::string> ChatTemplate::render(
    std::span<const ChatMessage> messages) const {
  if (markers_) return render_marked(messages);
  std::string out;
  for (const ChatMessage& m : messages) {
    const std::string& role = m.role == "user"        ? user_
                              : m.role == "assistant" ? assistant_
                                                      : system_;
    out += with_content(role, m.content);
  }
  return ChatPrompt{out + generation_prompt_, stop_, {}};
}

std::expected<ChatPrompt, std::string> ChatTemplate::render_marked(
    std::span<const ChatMessage> messages) const {
  const Markers& k = *markers_;
  // nanochat's render_conversation: a leading system message joins the first
  // user message.
  std::string system;
  std::size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  if (first == messages.size())
    return std::unexpected("the conversation has no user message to answer");
  PromptPieces rendered;
  rendered.pieces.emplace_back(k.bos);
  for (std::size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool user_turn = (i - first) % 2 == 0;
    if (m.role == "system")
      return std::unexpected(named(i, m) +
                             ": a system message may only come first (it joins the first "
                             "user message)");
    if (m.role != (user_turn ? "user" : "assistant"))
      return std::unexpected(named(i, m) + ": turns must alternate, user first, so this one " +
                             "must be the " + (user_turn ? "user's" : "assistant's"));
    std::string text = m.content;
    if (i == first && first == 1) text = system + "\n\n" + text;
    rendered.pieces.emplace_back(user_turn ? k.user_start : k.assistant_start);
    if (!text.empty()) rendered.pieces.emplace_back(std::move(text));
    rendered.pieces.emplace_back(user_turn ? k.user_end : k.assistant_end);
  }
  if (messages.back().role != "user")
    return std::unexpected(named(messages.size() - 1, messages.back()) +
                           ": the conversation must end with the user's turn, for the "
                           "assistant to answer");
  rendered.pieces.emplace_back(k.assistant_start);
  return ChatPrompt{std::move(rendered), {}, {k.assistant_end, k.bos}};
}

}  // namespace kvtier::wire
