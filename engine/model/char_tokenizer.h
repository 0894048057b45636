// Character-level tokenizer, as nanoGPT's shakespeare_char uses: one token per
// Unicode character (code point), token id = the character's index in the
// vocabulary file.
//
// vocab.json holds {"chars": ["\n", " ", "!", ...]}: a non-empty array of
// strings, each exactly one UTF-8 character, none repeated. Other keys are
// ignored, so a nanoGPT meta dump with extra fields still loads.
//
// Thread-safety: immutable after load; every method may be called concurrently.
#pragma once

#include <array>
#include <expected>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/tokenizer.h"

namespace kvtier {

class CharTokenizer final : public Tokenizer {
 public:
  // Reads and validates vocab.json. Errors name the file and the problem
  // (missing file, bad JSON, wrong shape, an entry that is not one character,
  // a duplicate).
  static std::expected<std::unique_ptr<CharTokenizer>, std::string> load(
      const std::filesystem::path& vocab_json);

  // As load, from the file's contents; `source_name` stands for the file in
  // error messages.
  static std::expected<std::unique_ptr<CharTokenizer>, std::string> parse(
      std::string_view json_text, std::string_view source_name);

  // Fails on invalid UTF-8 (naming the byte offset) or on a character the
  // vocabulary lacks (naming it, its code point and its byte offset).
  std::expected<std::vector<int>, std::string> encode(std::string_view text) const override;

  // REQUIRES: every id in [0, vocab_size()); ids outside are skipped.
  std::string decode(std::span<const int> tokens) const override;

  int vocab_size() const override { return static_cast<int>(id_to_utf8_.size()); }

 private:
  explicit CharTokenizer(std::vector<char32_t> chars);

  std::vector<std::string> id_to_utf8_;  // token id -> its character's UTF-8 bytes
  // ASCII is nearly all of the text a char model sees, so it skips the hash
  // map: ascii_ids_[c] is c's id or -1.
  std::array<int, 128> ascii_ids_;
  std::unordered_map<char32_t, int> non_ascii_ids_;
};

}  // namespace kvtier
