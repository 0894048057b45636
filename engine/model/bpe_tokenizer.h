// GPT-2's byte-level byte-pair encoding (BPE).
//
// How text becomes ids:
//  1. Pre-tokenize: split the text into pieces (bpe_pretokenizer.h), so
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
// The same two tables, as Hugging Face names and writes them: vocab.json is
// encoder.json, merges.txt is vocab.bpe. Its tokenizer.json holds both too,
// as model.vocab and model.merges (each merge a "left right" string or, in
// newer files, a ["left", "right"] pair), beside settings that must describe
// GPT-2's byte-level BPE (see load_tokenizer_json).
//
// Special tokens such as <|endoftext|> (id 50256) are ordinary entries here:
// decode() spells them out, and encode() never produces them from text.
//
// Thread-safety: every method may be called concurrently (the piece cache,
// bpe_piece_cache.h, is guarded by a mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/model/bpe_piece_cache.h"
#include "engine/model/bpe_pretokenizer.h"
#include "engine/model/tokenizer.h"

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

  // Reads a Hugging Face tokenizer.json. Only GPT-2's byte-level BPE is
  // accepted: model.type "BPE" with no subword prefix or suffix, a ByteLevel
  // pre_tokenizer (use_regex true, add_prefix_space false), no normalizer, a
  // ByteLevel decoder if any, and added_tokens that are model.vocab's own
  // entries. Anything else is refused with an error naming the file and what
  // it found (e.g. model.type "Unigram"); other errors as load's.
  static std::expected<std::unique_ptr<BpeTokenizer>, std::string> load_tokenizer_json(
      const std::filesystem::path& tokenizer_json);

  // As load_tokenizer_json, from the file's contents; `name` stands for it in errors.
  static std::expected<std::unique_ptr<BpeTokenizer>, std::string> parse_tokenizer_json(
      std::string_view text, std::string_view name);

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
  // A "left right" merge line split at its one space; nullopt when it is not that.
  static std::optional<std::pair<std::string_view, std::string_view>> merge_split(
      std::string_view line);
  // The tokens merges may use before the first merge: the 256 bytes', by id.
  std::vector<bool> byte_tokens() const;
  // Adds the merge of `left` and `right` (spelled in the byte alphabet) as the
  // next rank, after checking both sides are in `produced` and the result is
  // a new token of the vocabulary, which it then marks. `where` starts errors;
  // `vocab_where` names the vocabulary.
  std::expected<void, std::string> add_merge(std::string_view left, std::string_view right,
                                             const std::string& where,
                                             const std::string& vocab_where,
                                             std::vector<bool>& produced);
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using IdByBytes = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

  struct Merge {
    int rank;       // line order in vocab.bpe, 0 first
    int merged_id;  // the token the pair becomes
  };
  static std::uint64_t pair_key(int left, int right) {
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right);
  }

  BpeTokenizer() = default;
  // An empty tokenizer bound to the pre-tokenizer; fails where that does.
  static std::expected<std::unique_ptr<BpeTokenizer>, std::string> create();

  // Runs the merges over one pre-tokenized piece and appends its token ids.
  void merge_piece(std::string_view piece, std::vector<int>& out) const;

  const BpePretokenizer* pretokenizer_ = nullptr;  // the process's, never null once created
  std::vector<std::string> id_to_bytes_;
  IdByBytes id_by_bytes_;
  std::optional<int> end_of_text_;  // looked up once: the engine asks per token
  int byte_ids_[256] = {};
  std::unordered_map<std::uint64_t, Merge> merges_;  // by pair_key(left id, right id)

  BpePieceCache cache_;
};

}  // namespace kvtier
