// Tokenizer::load picks the implementation a config names; the helpers below
// are the UTF-8 and file plumbing both implementations share.
#include "engine/model/tokenizer.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include "engine/model/bpe_tokenizer.h"
#include "engine/model/char_tokenizer.h"
#include "engine/model/tiktoken_tokenizer.h"

namespace kvtier {

std::expected<std::unique_ptr<Tokenizer>, std::string> Tokenizer::load(const TokenizerSpec& spec) {
  switch (spec.type) {
    case TokenizerSpec::Type::kChar: {
      auto tok = CharTokenizer::load(spec.vocab);
      if (!tok) return std::unexpected(std::move(tok.error()));
      return std::unique_ptr<Tokenizer>(std::move(*tok));
    }
    case TokenizerSpec::Type::kBpe: {
      auto tok = BpeTokenizer::load(spec.vocab, spec.merges);
      if (!tok) return std::unexpected(std::move(tok.error()));
      return std::unique_ptr<Tokenizer>(std::move(*tok));
    }
    case TokenizerSpec::Type::kBpeTokenizerJson: {
      auto tok = BpeTokenizer::load_tokenizer_json(spec.vocab);
      if (!tok) return std::unexpected(std::move(tok.error()));
      return std::unique_ptr<Tokenizer>(std::move(*tok));
    }
    case TokenizerSpec::Type::kTiktoken: {
      auto tok = TiktokenTokenizer::load(spec.vocab, spec.pattern, spec.special_tokens);
      if (!tok) return std::unexpected(std::move(tok.error()));
      return std::unique_ptr<Tokenizer>(std::move(*tok));
    }
    case TokenizerSpec::Type::kNone:
      break;
  }
  return std::unexpected(
      "the model has no tokenizer: its folder holds none of encoder.json + vocab.bpe, "
      "vocab.json + merges.txt or tokenizer.json, and its config names none (add "
      "\"tokenizer\": {\"type\": \"char\" | \"bpe\", ...})");
}

namespace tokenizer_detail {

Utf8Char utf8_decode(std::string_view text, std::size_t offset) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(offset);
  const Utf8Char invalid{lead, 0};
  if (lead < 0x80) return {lead, 1};

  // The lead byte fixes the length and the smallest value that length may
  // encode; anything smaller is an overlong form, which UTF-8 forbids.
  int length;
  char32_t cp;
  char32_t min_cp;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, cp = lead & 0x1F, min_cp = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, cp = lead & 0x0F, min_cp = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, cp = lead & 0x07, min_cp = 0x10000;
  } else {
    return invalid;  // a continuation byte, or 0xF8..0xFF
  }
  if (offset + length > text.size()) return invalid;
  for (int i = 1; i < length; ++i) {
    const unsigned char next = byte(offset + i);
    if ((next & 0xC0) != 0x80) return invalid;
    cp = (cp << 6) | (next & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
  return {cp, length};
}

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string code_point_describe(char32_t cp) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(cp));
  std::string out = hex;
  // Control characters (C0, DEL, C1) would garble the message; show only the code.
  const bool control = cp < 0x20 || (cp >= 0x7F && cp < 0xA0);
  const bool encodable = cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  if (!control && encodable) {
    out += " '";
    utf8_append(cp, out);
    out += "'";
  }
  return out;
}

std::expected<std::string, std::string> file_read(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return std::unexpected(path.string() + ": no such file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(path.string() + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return std::unexpected(path.string() + ": read failed");
  return std::move(buffer).str();
}

}  // namespace tokenizer_detail
}  // namespace kvtier
