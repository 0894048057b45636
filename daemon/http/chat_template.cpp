#include "daemon/http/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/protocol.h"

namespace kvtier::daemon::http {

namespace {

// A chat template is a few short strings; anything larger is not one.
constexpr std::uintmax_t kMaxTemplateBytes = 64 << 10;

std::string with_content(const std::string& role_text, const std::string& content) {
  const std::size_t at = role_text.find("{content}");
  return role_text.substr(0, at) + content + role_text.substr(at + 9);
}

}  // namespace

std::expected<ChatTemplate, std::string> ChatTemplate::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path path = fs::path(model_dir) / "chat_template.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return ChatTemplate{};
  const std::string where = path.string() + ": ";
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
    std::string* role = key == "system"              ? &t.system
                        : key == "user"              ? &t.user
                        : key == "assistant"         ? &t.assistant
                        : key == "generation_prompt" ? &t.generation_prompt
                                                     : nullptr;
    if (role != nullptr) {
      if (!v.is_string()) return std::unexpected(where + "'" + key + "' must be a string");
      *role = v.get<std::string>();
      if (key != "generation_prompt" && role->find("{content}") == std::string::npos)
        return std::unexpected(where + "'" + key + "' must hold {content}");
    } else if (key == "stop") {
      if (!v.is_array()) return std::unexpected(where + "'stop' must be an array of strings");
      t.stop.clear();
      for (const auto& s : v) {
        if (!s.is_string()) return std::unexpected(where + "'stop' must be an array of strings");
        t.stop.push_back(s.get<std::string>());
      }
    } else {
      return std::unexpected(where + "unknown key '" + key +
                             "' (system, user, assistant, generation_prompt, stop)");
    }
  }
  return t;
}

std::string ChatTemplate::render(const std::vector<Message>& messages) const {
  std::string out;
  for (const Message& m : messages) {
    const std::string& role = m.role == "user" ? user : m.role == "assistant" ? assistant : system;
    out += with_content(role, m.content);
  }
  return out + generation_prompt;
}

}  // namespace kvtier::daemon::http
