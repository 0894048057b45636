#include "engine/model/char_tokenizer.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvtier {

using tokenizer_detail::code_point_describe;
using tokenizer_detail::utf8_append;
using tokenizer_detail::utf8_decode;

std::expected<std::unique_ptr<CharTokenizer>, std::string> CharTokenizer::load(
    const std::filesystem::path& vocab_json) {
  auto text = tokenizer_detail::file_read(vocab_json);
  if (!text) return std::unexpected(std::move(text.error()));
  return parse(*text, vocab_json.string());
}

std::expected<std::unique_ptr<CharTokenizer>, std::string> CharTokenizer::parse(
    std::string_view json_text, std::string_view source_name) {
  const std::string where(source_name);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return std::unexpected(where + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("chars") || !doc["chars"].is_array()) {
    return std::unexpected(where + ": expected an object with a \"chars\" array");
  }
  const nlohmann::json& entries = doc["chars"];
  if (entries.empty()) return std::unexpected(where + ": \"chars\" is empty");

  std::vector<char32_t> chars;
  chars.reserve(entries.size());
  std::unordered_map<char32_t, std::size_t> first_index;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string entry_name = where + ": chars[" + std::to_string(i) + "]";
    if (!entries[i].is_string()) return std::unexpected(entry_name + " is not a string");
    const std::string& s = entries[i].get_ref<const std::string&>();
    if (s.empty()) return std::unexpected(entry_name + " is empty; expected one character");
    // nlohmann::json rejects invalid UTF-8 while parsing, so a failed decode
    // here means the string holds more than one character.
    const auto ch = utf8_decode(s, 0);
    if (ch.length == 0 || static_cast<std::size_t>(ch.length) != s.size()) {
      return std::unexpected(entry_name + " (\"" + s + "\") must be exactly one character");
    }
    const auto [it, inserted] = first_index.emplace(ch.code_point, i);
    if (!inserted) {
      return std::unexpected(entry_name + " repeats chars[" + std::to_string(it->second) + "], " +
                             code_point_describe(ch.code_point));
    }
    chars.push_back(ch.code_point);
  }
  return std::unique_ptr<CharTokenizer>(new CharTokenizer(std::move(chars)));
}

CharTokenizer::CharTokenizer(std::vector<char32_t> chars) {
  ascii_ids_.fill(-1);
  id_to_utf8_.reserve(chars.size());
  for (std::size_t id = 0; id < chars.size(); ++id) {
    const char32_t cp = chars[id];
    if (cp < ascii_ids_.size()) {
      ascii_ids_[cp] = static_cast<int>(id);
    } else {
      non_ascii_ids_.emplace(cp, static_cast<int>(id));
    }
    std::string utf8;
    utf8_append(cp, utf8);
    id_to_utf8_.push_back(std::move(utf8));
  }
}

std::expected<std::vector<int>, std::string> CharTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  ids.reserve(text.size());
  std::size_t offset = 0;
  while (offset < text.size()) {
    const auto ch = utf8_decode(text, offset);
    if (ch.length == 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned>(ch.code_point));
      return std::unexpected("invalid UTF-8 at byte offset " + std::to_string(offset) + " (byte " +
                             byte + ")");
    }
    int id = -1;
    if (ch.code_point < ascii_ids_.size()) {
      id = ascii_ids_[ch.code_point];
    } else if (auto it = non_ascii_ids_.find(ch.code_point); it != non_ascii_ids_.end()) {
      id = it->second;
    }
    if (id < 0) {
      return std::unexpected("character " + code_point_describe(ch.code_point) +
                             " at byte offset " + std::to_string(offset) +
                             " is not in the vocabulary");
    }
    ids.push_back(id);
    offset += ch.length;
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int> tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (const int id : tokens) {
    if (id < 0 || id >= vocab_size()) continue;
    out += id_to_utf8_[id];
  }
  return out;
}

}  // namespace kvtier
