// The pre-tokenizer of byte-level BPE: the split of text into pieces that
// merges never cross (bpe_tokenizer.h, step 1). Each vocabulary names its
// split pattern, written for Python's `regex` module or tiktoken's Rust regex:
//  * GPT-2 (gpt2()):
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    contractions, then an optional single space followed by a run of
//    letters, of numbers or of other characters, then whitespace runs (a run
//    followed by text gives up its last character, so " word" stays together);
//  * nanochat's (GPT-4's with numbers of at most two digits), and any other a
//    tiktoken vocabulary carries, through compile().
// They run here in PCRE2 with Unicode properties, so every script splits as
// it does there (up to the libraries' Unicode versions: Debian 12's PCRE2
// knows Unicode 14). \s and \S are read as \p{White_Space} and its negation,
// which is what they mean in those dialects: under PCRE2_UCP, \s is \p{Z}
// plus \h and \v, which also takes in U+180E (a space until Unicode 6.3) and
// leaves out U+0085.
//
// Every byte of the text lands in exactly one piece. Text no match takes
// becomes a piece of its own: each maximal run of bytes that are not valid
// UTF-8 (a stray continuation byte, a truncated sequence, an overlong form, a
// surrogate), and, for a pattern that does not cover every character, the
// characters it leaves (tiktoken would drop them; here nothing is lost).
// Empty matches are never taken, and a match that exceeds PCRE2's limits
// (a pathological pattern) leaves the rest of the text as one piece, so no
// pattern can hang split().
//
// Thread-safety: split() may be called concurrently; each call has its own
// match state.
#pragma once

#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

class BpePretokenizer {
 public:
  // GPT-2's pattern, compiled (and JIT-compiled where PCRE2 can) once for
  // the process. Fails only where PCRE2 was built without Unicode support;
  // the error says so.
  static std::expected<const BpePretokenizer*, std::string> gpt2();

  // Any other pattern, in the dialect above. Errors quote PCRE2's message
  // and the offset in the pattern.
  static std::expected<std::unique_ptr<BpePretokenizer>, std::string> compile(
      std::string_view pattern);

  // The pieces, in order, as views into `text`; they concatenate back to it
  // and none is empty.
  std::vector<std::string_view> split(std::string_view text) const;

  ~BpePretokenizer();
  BpePretokenizer(const BpePretokenizer&) = delete;
  BpePretokenizer& operator=(const BpePretokenizer&) = delete;

 private:
  struct Code;  // PCRE2's compiled pattern and match limits, kept out of this header
  explicit BpePretokenizer(Code* code) : code_(code) {}
  Code* code_;
};

}  // namespace kvtier
