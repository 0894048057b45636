// GPT-2's byte-level byte-pair encoding (BPE).
//
// How text becomes ids:
//  1. Pre-tokenize: split the text into pieces (bpe_pretokenize below), so
//     merges never cross a word, number or punctuation boundary.
//  2. Each piece starts as one symbol per byte. Every byte has a token, so any
//     byte string encodes, including invalid UTF-8.
//  3. Merge: repeatedly pick the adjacent pair of symbols whose merge comes
//     earliest in vocab.bpe and join every occurrence of it, left to right,
//     until no adjacent pair has a merge.
//  4. Each remaining symbol is a token of encoder.json.
//
// Files (as OpenAI published them for GPT-2; see models/gpt2-bpe/):
//  * encoder.json: {"token": id, ...}. Tokens are written in GPT-2's byte
//    alphabet, which spells each byte as one printable character: the
//    printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for
//    themselves, and the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD)
//    become U+0100.. in byte order, so the space byte is 'Ġ' (U+0120). Ids
//    must be exactly 0..N-1, each once; every single byte must have a token.
//  * vocab.bpe: a "#version" line, then one merge per line, "left right" in
//    the same alphabet; line order is the merge's rank (earlier wins). Both
//    sides must be a byte or the result of an earlier merge, each merge must
//    produce a new token, and that token must be in encoder.json. GPT-2's
//    files satisfy this; it is what lets encode() process merges with a
//    priority queue and still match the reference one-rank-at-a-time loop.
//
// Special tokens such as <|endoftext|> (id 50256) are ordinary entries here:
// decode() spells them out, and encode() never produces them from text.
//
// Thread-safety: every method may be called concurrently; the merge cache is
// guarded by a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer.h"

namespace kvtier {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads and validates encoder.json and vocab.bpe. Errors name the file and
  // the problem (missing file, bad JSON, bad id, bad merge line, a merge using
  // a symbol that is neither a byte nor an earlier merge's result).
  static std::expected<std::unique_ptr<BpeTokenizer>, std::string> load(
      const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe);

  // As load, from the files' contents; the names stand for the files in errors.
  static std::expected<std::unique_ptr<BpeTokenizer>, std::string> parse(
      std::string_view encoder_json_text, std::string_view encoder_name,
      std::string_view vocab_bpe_text, std::string_view vocab_bpe_name);

  // Never fails: byte-level BPE has a token for every byte.
  std::expected<std::vector<int>, std::string> encode(std::string_view text) const override;

  // The bytes the tokens stand for; a token may hold part of a UTF-8
  // character, so the result is not always valid UTF-8 on its own.
  // REQUIRES: every id in [0, vocab_size()); ids outside are skipped.
  std::string decode(std::span<const int> tokens) const override;

  int vocab_size() const override { return static_cast<int>(id_to_bytes_.size()); }

  // The id of the token whose bytes are exactly `bytes`, or -1.
  int token_id(std::string_view bytes) const;

  // <|endoftext|>, when encoder.json has it.
  std::optional<int> end_of_text() const override { return end_of_text_; }

 private:
  // parse()'s parts: encoder.json's tokens (and the 256 byte tokens), then
  // vocab.bpe's merges, each checked against what came before.
  std::expected<void, std::string> read_vocabulary(const nlohmann::json& doc,
                                                   const std::string& enc_where);
  std::expected<void, std::string> read_merges(std::string_view vocab_bpe_text,
                                               std::string_view vocab_bpe_name,
                                               const std::string& enc_where);
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using IdByBytes = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;
  using IdsByPiece = std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>>;

  struct Merge {
    int rank;       // line order in vocab.bpe, 0 first
    int merged_id;  // the token the pair becomes
  };
  static std::uint64_t pair_key(int left, int right) {
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right);
  }

  BpeTokenizer() = default;

  // Runs the merges over one pre-tokenized piece and appends its token ids.
  void merge_piece(std::string_view piece, std::vector<int>& out) const;

  std::vector<std::string> id_to_bytes_;
  IdByBytes id_by_bytes_;
  std::optional<int> end_of_text_;  // looked up once: the engine asks per token
  int byte_ids_[256] = {};
  std::unordered_map<std::uint64_t, Merge> merges_;  // by pair_key(left id, right id)

  // Pieces repeat (" the", " of", ...), so their merge results are cached.
  // Cleared when it reaches kCacheMaxEntries so a long-running daemon's
  // memory stays bounded; pieces longer than kCacheMaxPieceBytes skip it.
  static constexpr std::size_t kCacheMaxEntries = 1 << 16;
  static constexpr std::size_t kCacheMaxPieceBytes = 64;
  mutable std::mutex cache_mu_;
  mutable IdsByPiece cache_;  // GUARDED_BY(cache_mu_)
};

// The character classes GPT-2's pre-tokenizer distinguishes.
enum class BpeCharClass { kLetter, kNumber, kSpace, kOther };

// Approximates Unicode's \p{L} (letter), \p{N} (number) and \s (White_Space)
// with a compact table; the pre-tokenizer needs nothing finer. Exact (checked
// against Python's `regex` module, Unicode 16) for:
//   * whitespace everywhere;
//   * letters and numbers in U+0000..U+052F (ASCII, Latin-1, Latin Extended
//     A/B, IPA, Greek, Cyrillic), Armenian, Hebrew, Arabic (U+0600..06FF),
//     Thai, Georgian, Hangul, Latin Extended Additional, Greek Extended,
//     U+2000..U+218F (superscripts, letterlike symbols, number forms),
//     enclosed and dingbat numbers, CJK symbols, kana, bopomofo, CJK
//     ideographs (all planes), CJK compatibility ideographs and fullwidth
//     forms;
//   * decimal digits (\p{Nd}) of every script.
// Elsewhere letters and numbers count as kOther, so text in other scripts
// (Devanagari letters, say) splits differently from GPT-2's own encoder:
// the ids may differ, but decode(encode(s)) == s still holds.
BpeCharClass bpe_char_classify(char32_t code_point);

// Splits text the way GPT-2's pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does: contractions, then an optional single space followed by a run of
// letters, of numbers or of other characters, then whitespace runs (a run
// followed by text gives up its last character, so " word" stays together).
// Bytes that are not valid UTF-8 count as kOther, one byte at a time. The
// pieces are views into `text` and concatenate back to it.
std::vector<std::string_view> bpe_pretokenize(std::string_view text);

}  // namespace kvtier
