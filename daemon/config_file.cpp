#include "daemon/config_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon/setting_flags.h"

namespace kvtier::daemon {

using nlohmann::json;

namespace {

// `text` for a message: at most 64 bytes, and bytes that are not printable
// ASCII as \xNN, so a binary file cannot garble the terminal.
std::string printable(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > 64) out += "...";
  return out;
}

// "max-batch-size" and "max_batch_size" both name max_batch_size.
std::string setting_name(std::string_view key) {
  std::string name(key);
  std::ranges::replace(name, '-', '_');
  return name;
}

// A TOML value as the JSON setting_store() checks; a string goes through
// the flag's reading (a size's suffix).
std::expected<json, std::string> value_of(const Setting& s, const toml::node& node) {
  if (auto b = node.as_boolean()) return json(b->get());
  if (auto i = node.as_integer()) return json(i->get());
  if (auto f = node.as_floating_point()) return json(f->get());
  if (auto t = node.as_string()) return setting_value_from_text(s, t->get());
  const char* what = node.is_table() ? "a table" : node.is_array() ? "an array" : "a date or time";
  return std::unexpected(std::string("must be ") + setting_accepts(s) + ", got " + what);
}

}  // namespace

std::string config_file_check(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return path + ": no such file";
  if (!std::filesystem::is_regular_file(status)) return path + ": not a regular file";
  const auto bytes = std::filesystem::file_size(path, ec);
  if (ec) return path + ": " + ec.message();
  if (bytes > kMaxConfigBytes)
    return path + ": " + std::to_string(bytes) + " bytes; a config file has at most " +
           std::to_string(kMaxConfigBytes);
  return "";
}

std::expected<std::vector<std::string>, std::string> config_file_apply(const std::string& path,
                                                                       DaemonConfig& config) {
  if (std::string why = config_file_check(path); !why.empty()) return std::unexpected(why);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return std::unexpected(path + ": cannot read it");
  if (text.str().size() > kMaxConfigBytes)  // grew since the check
    return std::unexpected(path + ": larger than " + std::to_string(kMaxConfigBytes) + " bytes");

  toml::table table;
  try {
    table = toml::parse(text.str(), path);
  } catch (const toml::parse_error& e) {
    return std::unexpected(path + ":" + std::to_string(e.source().begin.line) +
                           ": not TOML: " + printable(e.description()));
  }

  std::vector<std::string> given;
  std::map<std::string, std::string> seen;  // setting name -> where it was given
  for (const auto& [key, node] : table) {
    const std::string where =
        path + ":" + std::to_string(key.source().begin.line) + ": " + printable(key.str());
    if (node.is_table())
      return std::unexpected(where + ": settings are top-level keys, not tables");
    const Setting* s = setting_find(setting_name(key.str()));
    if (!s) {
      return std::unexpected(where + ": no such setting (the keys are kvtierd's long flag " +
                             "names without the dashes: see kvtierd --help)");
    }
    if (auto [it, fresh] = seen.emplace(s->name, where); !fresh)
      return std::unexpected(where + ": given already, at " + it->second);
    auto value = value_of(*s, node);
    if (!value) return std::unexpected(where + ": " + value.error());
    if (s->type == SettingType::kDirectory && value->is_string() &&
        !std::filesystem::is_directory(value->get<std::string>())) {
      return std::unexpected(where + ": " + printable(value->get<std::string>()) +
                             " is not a directory");
    }
    if (auto ok = setting_store(*s, config, *value); !ok)
      return std::unexpected(where + ": " + ok.error());
    given.emplace_back(s->name);
  }
  return given;
}

}  // namespace kvtier::daemon
