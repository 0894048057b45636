// GPT-2's pre-tokenizer: the split of text into pieces that BPE merges never
// cross (bpe_tokenizer.h, step 1). GPT-2's encoder splits with the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// in Python's `regex` module: contractions, then an optional single space
// followed by a run of letters, of numbers or of other characters, then
// whitespace runs (a run followed by text gives up its last character, so
// " word" stays together). This runs the same pattern in PCRE2 with Unicode
// properties, so every script splits as it does for GPT-2 (up to the two
// libraries' Unicode versions: Debian 12's PCRE2 knows Unicode 14).
//
// Bytes that are not valid UTF-8 (a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate) match no part of the pattern; each
// maximal run of them becomes a piece of its own, so every byte of the text
// lands in exactly one piece and still encodes.
//
// Thread-safety: split() may be called concurrently; each call has its own
// match state.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

class BpePretokenizer {
 public:
  // The process's one compiled pattern (compiled, and JIT-compiled where PCRE2
  // can, on first use). Fails only where PCRE2 was built without Unicode
  // support; the error says so.
  static std::expected<const BpePretokenizer*, std::string> get();

  // The pieces, in order, as views into `text`; they concatenate back to it
  // and none is empty.
  std::vector<std::string_view> split(std::string_view text) const;

  BpePretokenizer(const BpePretokenizer&) = delete;
  BpePretokenizer& operator=(const BpePretokenizer&) = delete;

 private:
  struct Code;  // PCRE2's compiled pattern, kept out of this header
  explicit BpePretokenizer(Code* code) : code_(code) {}
  Code* code_;  // lives as long as the process
};

}  // namespace kvtier
