#include "engine/model/bpe_tokenizer.h"

#include <array>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/model/bpe_merge.h"

namespace kvtier {
namespace {

using tokenizer_detail::utf8_append;
using tokenizer_detail::utf8_decode;

// ---------------------------------------------------------------------------
// GPT-2's byte alphabet: each byte as one printable character.

constexpr bool byte_prints_as_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  // The alphabet is U+0021..U+0143, so a flat table inverts it; -1 = not in it.
  static constexpr char32_t kMaxChar = 0x100 + 68;
  std::array<int, kMaxChar> byte_of_char{};

  constexpr ByteAlphabet() {
    byte_of_char.fill(-1);
    char32_t next_extra = 0x100;  // non-printable bytes, in byte order
    for (int b = 0; b < 256; ++b) {
      const char32_t c = byte_prints_as_itself(b) ? static_cast<char32_t>(b) : next_extra++;
      char_of_byte[b] = c;
      byte_of_char[c] = b;
    }
  }
};
constexpr ByteAlphabet kAlphabet;

// A token as encoder.json and vocab.bpe spell it -> its raw bytes. Fails on a
// character outside the alphabet.
std::expected<std::string, std::string> alphabet_to_bytes(std::string_view spelled) {
  std::string bytes;
  bytes.reserve(spelled.size());
  for (std::size_t i = 0; i < spelled.size();) {
    const auto ch = utf8_decode(spelled, i);
    if (ch.length == 0) return std::unexpected("invalid UTF-8");
    if (ch.code_point >= ByteAlphabet::kMaxChar || kAlphabet.byte_of_char[ch.code_point] < 0) {
      return std::unexpected(tokenizer_detail::code_point_describe(ch.code_point) +
                             " is not in GPT-2's byte alphabet");
    }
    bytes += static_cast<char>(kAlphabet.byte_of_char[ch.code_point]);
    i += ch.length;
  }
  return bytes;
}

std::string bytes_to_alphabet(std::string_view bytes) {
  std::string spelled;
  for (const char b : bytes) {
    utf8_append(kAlphabet.char_of_byte[static_cast<unsigned char>(b)], spelled);
  }
  return spelled;
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

}  // namespace

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::create() {
  auto pretokenizer = BpePretokenizer::gpt2();
  if (!pretokenizer) return std::unexpected(std::move(pretokenizer.error()));
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  tok->pretokenizer_ = *pretokenizer;
  return tok;
}

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::load(
    const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
  auto encoder_text = tokenizer_detail::file_read(encoder_json);
  if (!encoder_text) return std::unexpected(std::move(encoder_text.error()));
  auto merges_text = tokenizer_detail::file_read(vocab_bpe);
  if (!merges_text) return std::unexpected(std::move(merges_text.error()));
  return parse(*encoder_text, encoder_json.string(), *merges_text, vocab_bpe.string());
}

std::expected<std::unique_ptr<BpeTokenizer>, std::string> BpeTokenizer::parse(
    std::string_view encoder_json_text, std::string_view encoder_name,
    std::string_view vocab_bpe_text, std::string_view vocab_bpe_name) {
  const std::string enc_where(encoder_name);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(encoder_json_text);
  } catch (const nlohmann::json::exception& e) {
    return std::unexpected(enc_where + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object() || doc.empty()) {
    return std::unexpected(enc_where + ": expected a non-empty object {\"token\": id, ...}");
  }

  auto tok = create();
  if (!tok) return tok;
  if (auto ok = (*tok)->read_vocabulary(doc, enc_where); !ok) return std::unexpected(ok.error());
  if (auto ok = (*tok)->read_merges(vocab_bpe_text, vocab_bpe_name, enc_where); !ok)
    return std::unexpected(ok.error());
  if (const int eot = (*tok)->token_id("<|endoftext|>"); eot >= 0) (*tok)->end_of_text_ = eot;
  return tok;
}

std::expected<void, std::string> BpeTokenizer::read_vocabulary(const nlohmann::json& doc,
                                                               const std::string& enc_where) {
  const std::size_t vocab_size = doc.size();
  id_to_bytes_.resize(vocab_size);
  std::vector<bool> id_seen(vocab_size, false);
  id_by_bytes_.reserve(vocab_size);
  for (const auto& [spelled, value] : doc.items()) {
    const std::string entry = enc_where + ": token " + in_quotes(spelled);
    if (!value.is_number_integer()) return std::unexpected(entry + ": id is not an integer");
    const auto id = value.get<std::int64_t>();
    if (id < 0 || static_cast<std::uint64_t>(id) >= vocab_size) {
      return std::unexpected(entry + ": id " + std::to_string(id) + " is outside [0, " +
                             std::to_string(vocab_size) + "), the range " +
                             std::to_string(vocab_size) + " tokens must number");
    }
    if (id_seen[id]) {
      return std::unexpected(entry + ": id " + std::to_string(id) + " is used twice");
    }
    id_seen[id] = true;
    auto bytes = alphabet_to_bytes(spelled);
    if (!bytes || bytes->empty()) {
      return std::unexpected(entry + ": " + (bytes ? "empty token" : bytes.error()));
    }
    if (!id_by_bytes_.emplace(*bytes, static_cast<int>(id)).second) {
      return std::unexpected(entry + ": spells the same bytes as another token");
    }
    id_to_bytes_[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const int id = token_id(std::string_view(&byte, 1));
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      return std::unexpected(enc_where + ": no token for byte " + hex + " (" +
                             in_quotes(bytes_to_alphabet(std::string(1, static_cast<char>(b)))) +
                             "); byte-level BPE needs all 256");
    }
    byte_ids_[b] = id;
  }

  return {};
}

std::vector<bool> BpeTokenizer::byte_tokens() const {
  std::vector<bool> produced(id_to_bytes_.size(), false);
  for (const int id : byte_ids_) produced[id] = true;
  return produced;
}

std::expected<void, std::string> BpeTokenizer::add_merge(std::string_view left,
                                                         std::string_view right,
                                                         const std::string& where,
                                                         const std::string& vocab_where,
                                                         std::vector<bool>& produced) {
  int side_ids[2];
  const std::string_view sides[2] = {left, right};
  for (int s = 0; s < 2; ++s) {
    auto bytes = alphabet_to_bytes(sides[s]);
    if (!bytes) return std::unexpected(where + ": " + in_quotes(sides[s]) + ": " + bytes.error());
    side_ids[s] = token_id(*bytes);
    if (side_ids[s] < 0 || !produced[side_ids[s]]) {
      return std::unexpected(where + ": unknown symbol " + in_quotes(sides[s]) +
                             ": neither a byte nor the result of an earlier merge");
    }
  }
  const std::string merged = id_to_bytes_[side_ids[0]] + id_to_bytes_[side_ids[1]];
  const int merged_id = token_id(merged);
  if (merged_id < 0) {
    return std::unexpected(where + ": the merge's result " + in_quotes(bytes_to_alphabet(merged)) +
                           " is not in " + vocab_where);
  }
  if (produced[merged_id]) {
    return std::unexpected(where + ": " + in_quotes(bytes_to_alphabet(merged)) +
                           " is already a byte or an earlier merge's result");
  }
  produced[merged_id] = true;
  const int rank = static_cast<int>(merges_.size());
  merges_.emplace(pair_key(side_ids[0], side_ids[1]), Merge{rank, merged_id});
  return {};
}

std::optional<std::pair<std::string_view, std::string_view>> BpeTokenizer::merge_split(
    std::string_view line) {
  const std::size_t space = line.find(' ');
  if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return std::pair{line.substr(0, space), line.substr(space + 1)};
}

std::expected<void, std::string> BpeTokenizer::read_merges(std::string_view vocab_bpe_text,
                                                           std::string_view vocab_bpe_name,
                                                           const std::string& enc_where) {
  // produced[id] marks the tokens merges may use so far: the bytes, then each
  // merge's result as its line is read.
  const std::string bpe_where(vocab_bpe_name);
  std::vector<bool> produced = byte_tokens();
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < vocab_bpe_text.size();) {
    std::size_t nl = vocab_bpe_text.find('\n', pos);
    if (nl == std::string_view::npos) nl = vocab_bpe_text.size();
    std::string_view line = vocab_bpe_text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;

    const std::string where = bpe_where + ":" + std::to_string(line_no);
    const auto sides = merge_split(line);
    if (!sides) {
      return std::unexpected(where + ": expected two symbols separated by one space, got " +
                             in_quotes(line));
    }
    if (auto ok = add_merge(sides->first, sides->second, where, enc_where, produced); !ok)
      return ok;
  }
  return {};
}

int BpeTokenizer::token_id(std::string_view bytes) const {
  const auto it = id_by_bytes_.find(bytes);
  return it == id_by_bytes_.end() ? -1 : it->second;
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<int>& out) const {
  // The order bpe_merge joins in is the reference loop's (merge every
  // occurrence of the best pair, left to right, then look again) because a
  // merge's result only takes part in later-ranked merges (checked at load),
  // so a new pair never outranks the one just merged.
  bpe_merge(
      piece, [this](unsigned char byte) { return byte_ids_[byte]; },
      [this](const PartView& pair) -> std::optional<PartJoin> {
        const auto it = merges_.find(pair_key(pair.left_id, pair.right_id));
        if (it == merges_.end()) return std::nullopt;
        return PartJoin{it->second.rank, it->second.merged_id};
      },
      out);
}

std::expected<std::vector<int>, std::string> BpeTokenizer::encode(std::string_view text) const {
  return cache_.encode(*pretokenizer_, text, [this](std::string_view piece, std::vector<int>& out) {
    merge_piece(piece, out);
  });
}

std::string BpeTokenizer::decode(std::span<const int> tokens) const {
  std::string out;
  out.reserve(tokens.size() * 4);
  for (const int id : tokens) {
    if (id < 0 || id >= vocab_size()) continue;
    out += id_to_bytes_[id];
  }
  return out;
}

}  // namespace kvtier
