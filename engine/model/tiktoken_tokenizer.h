// tiktoken's byte-level BPE: the tokenizer of nanochat's models (a
// tiktoken.Encoding it pickles, notes/nanochat.md §4) and of OpenAI's later
// vocabularies, with the ids tiktoken's own encode_ordinary gives.
//
// How text becomes ids:
//  1. Pre-tokenize with the vocabulary's own split pattern (bpe_pretokenizer.h).
//  2. A piece that is a token whole is that token. Otherwise it starts as one
//     part per byte, and the adjacent pair whose joined bytes have the lowest
//     rank is joined, the leftmost of equals first, until no joined pair is a
//     token; each part is then a token. (GPT-2's files list merges; tiktoken's
//     list only tokens, and a pair's rank is the rank of what it makes.)
//
// Files: the ranks in tiktoken's own format (what OpenAI publishes as
// cl100k_base.tiktoken and tiktoken.load.load_tiktoken_bpe reads): one line
// per token, "<base64 of its bytes> <rank>", the rank being the token's id.
// Ranks must be 0..N-1, each once, and every single byte must be a token, so
// any bytes encode. The split pattern and the special tokens (name -> id,
// outside the ranks) come from the model's config (model_config.h).
//
// Special tokens: encode() never produces one; text that spells
// "<|assistant_end|>" gets that text's ordinary tokens, as tiktoken's
// encode_ordinary does and as nanochat encodes what its users type. They
// enter a sequence only by id, through special_token(): the chat format's
// markers. decode() spells a special token out, as tiktoken does.
//
// end_of_text(): "<|endoftext|>" where the vocabulary has it (OpenAI's),
// else "<|bos|>" (nanochat's, which begins every document it trained on, so
// a model that samples it has ended one).
//
// Thread-safety: every method may be called concurrently (the piece cache,
// bpe_piece_cache.h, is guarded by a mutex).
#pragma once

#include <expected>
#include <filesystem>
#include <memory>
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

class TiktokenTokenizer final : public Tokenizer {
 public:
  // Reads the ranks file and checks the rest against it. Errors name the
  // file (and line) or the setting, and the problem: bad base64, a rank out
  // of order or repeated, a token twice, a byte with no token, a pattern
  // PCRE2 refuses, a special token colliding with a rank or another special.
  static std::expected<std::unique_ptr<TiktokenTokenizer>, std::string> load(
      const std::filesystem::path& ranks_file, std::string_view pattern,
      std::span<const SpecialToken> special_tokens);

  // As load, from the file's contents; `ranks_name` stands for it in errors.
  static std::expected<std::unique_ptr<TiktokenTokenizer>, std::string> parse(
      std::string_view ranks_text, std::string_view ranks_name, std::string_view pattern,
      std::span<const SpecialToken> special_tokens);

  // Never fails: every byte is a token. Never produces a special token.
  std::expected<std::vector<int>, std::string> encode(std::string_view text) const override;

  // The bytes the ids stand for, special tokens spelled out; an id that is
  // neither a rank nor a special token decodes to nothing.
  std::string decode(std::span<const int> tokens) const override;

  // One past the largest id, rank or special.
  int vocab_size() const override { return vocab_size_; }

  std::optional<int> end_of_text() const override { return end_of_text_; }
  // "<|bos|>" where the vocabulary has it (nanochat's documents begin with it).
  std::optional<int> begin_of_text() const override { return special_token("<|bos|>"); }

  // The id of the special token spelled `text`, if the vocabulary has it.
  std::optional<int> special_token(std::string_view text) const;

  // Ranks the file holds (the mergeable tokens, specials aside).
  int rank_count() const { return static_cast<int>(bytes_of_rank_.size()); }

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using IdByBytes = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

  TiktokenTokenizer() = default;
  std::expected<void, std::string> read_ranks(std::string_view text, const std::string& where);
  std::expected<void, std::string> add_specials(std::span<const SpecialToken> special_tokens);

  int rank_of(std::string_view bytes) const;  // -1 where `bytes` is no token
  // tiktoken's byte_pair_merge over one piece, appending its ids.
  void merge_piece(std::string_view piece, std::vector<int>& out) const;

  std::unique_ptr<BpePretokenizer> pretokenizer_;
  std::vector<std::string> bytes_of_rank_;
  IdByBytes rank_by_bytes_;
  std::vector<SpecialToken> specials_;
  int vocab_size_ = 0;
  std::optional<int> end_of_text_;

  BpePieceCache cache_;
};

}  // namespace kvtier
