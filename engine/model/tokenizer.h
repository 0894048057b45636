// Text <-> token ids.
//
// Three kinds, chosen by the model's config or found in its folder (see model_config.h):
//  * char: nanoGPT shakespeare_char style; vocab.json is {"chars": [...]},
//    one UTF-8 character per entry, token id = index.
//  * bpe: GPT-2 byte-level BPE from encoder.json + vocab.bpe (or Hugging
//    Face's vocab.json + merges.txt, or its tokenizer.json).
//  * tiktoken: tiktoken's byte-level BPE (nanochat's models), a ranks file
//    with the split pattern and special tokens the config gives
//    (tiktoken_tokenizer.h).
//
// Contract: decode(encode(s)) == s for every s that encode accepts.
// decode() returns bytes: a single BPE token may hold part of a UTF-8
// character, and concatenating the decodes of consecutive pieces of a token
// sequence equals decoding the whole sequence.
// Thread-safety: const methods may be called concurrently.
#pragma once

#include <cstddef>
#include <expected>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace kvtier {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Fails (naming the character and its byte offset) when text holds a
  // character the vocabulary lacks; byte-level BPE accepts any bytes.
  virtual std::expected<std::vector<int>, std::string> encode(std::string_view text) const = 0;

  // An id the vocabulary lacks decodes to nothing: a model may have more
  // rows than its tokenizer has tokens (nanoGPT pads GPT-2's 50257 to
  // 50304), and a sampled padding row is text of no characters.
  virtual std::string decode(std::span<const int> tokens) const = 0;

  virtual int vocab_size() const = 0;

  // The token that ends a text, where the vocabulary has one (GPT-2's
  // <|endoftext|>, id 50256): generation stops when the model samples it.
  virtual std::optional<int> end_of_text() const { return std::nullopt; }

  // The token a text begins with, where the vocabulary has one (nanochat's
  // <|bos|>): the front doors put it before an encoded text prompt. GPT-2's
  // texts begin with nothing.
  virtual std::optional<int> begin_of_text() const { return std::nullopt; }

  // Builds the tokenizer a config names. Errors name the file and the problem.
  static std::expected<std::unique_ptr<Tokenizer>, std::string> load(const TokenizerSpec& spec);
};

// Building blocks the tokenizer implementations share (tokenizer.cpp); not
// meant for callers outside engine/.
namespace tokenizer_detail {

// One character decoded from UTF-8. length is its size in bytes (1..4), or 0
// when the bytes at that offset are not valid UTF-8: a stray continuation
// byte, a truncated sequence, an overlong form, a surrogate (U+D800..DFFF) or
// a value above U+10FFFF. code_point is then the offending byte.
struct Utf8Char {
  char32_t code_point = 0;
  int length = 0;
};

// REQUIRES: offset < text.size().
Utf8Char utf8_decode(std::string_view text, std::size_t offset);

// REQUIRES: code_point <= U+10FFFF and not a surrogate.
void utf8_append(char32_t code_point, std::string& out);

// "U+00E9 'é'" for printable characters, "U+000A" for control characters:
// names a character in an error message without breaking the message.
std::string code_point_describe(char32_t code_point);

// The whole file as bytes. Errors name the path.
std::expected<std::string, std::string> file_read(const std::filesystem::path& path);

}  // namespace tokenizer_detail

}  // namespace kvtier
