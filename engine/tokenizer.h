// Text <-> token ids.
//
// Two kinds, chosen by the model's config (see model_config.h):
//  * char: nanoGPT shakespeare_char style; vocab.json is {"chars": [...]},
//    one UTF-8 character per entry, token id = index.
//  * bpe: GPT-2 byte-level BPE from encoder.json + vocab.bpe.
//
// Contract: decode(encode(s)) == s for every s that encode accepts.
// decode() returns bytes: a single BPE token may hold part of a UTF-8
// character, and concatenating the decodes of consecutive pieces of a token
// sequence equals decoding the whole sequence.
// Thread-safety: const methods may be called concurrently.
#pragma once

#include <expected>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_config.h"

namespace kvtier {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Fails (naming the character and its byte offset) when text holds a
  // character the vocabulary lacks; byte-level BPE accepts any bytes.
  virtual std::expected<std::vector<int>, std::string> encode(std::string_view text) const = 0;

  // REQUIRES: every id in [0, vocab_size()).
  virtual std::string decode(std::span<const int> tokens) const = 0;

  virtual int vocab_size() const = 0;

  // Builds the tokenizer a config names. Errors name the file and the problem.
  static std::expected<std::unique_ptr<Tokenizer>, std::string> load(const TokenizerSpec& spec);
};

}  // namespace kvtier
