#include "engine/model/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <new>

namespace kvtier {
namespace {

// GPT-2's pattern with \s spelled \p{White_Space} (and \S its negation): under
// PCRE2_UCP, \s is \p{Z} plus \h and \v, which also takes in U+180E, a space
// until Unicode 6.3 and White_Space no longer; the `regex` module's \s is
// White_Space exactly.
constexpr char kPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

struct BpePretokenizer::Code {
  pcre2_code* pattern;
};

std::expected<const BpePretokenizer*, std::string> BpePretokenizer::get() {
  // Compiled once; the compiled pattern is read-only, so threads share it.
  static const std::expected<const BpePretokenizer*, std::string> instance =
      []() -> std::expected<const BpePretokenizer*, std::string> {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: invalid UTF-8 is skipped over instead of failing the
    // whole match (PCRE2 10.34+), which is what lets split() keep such bytes.
    pcre2_code* pattern = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
    if (pattern == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      return std::unexpected(
          std::string("PCRE2 cannot compile GPT-2's pre-tokenizer pattern (is it built with "
                      "Unicode support?): ") +
          reinterpret_cast<const char*>(message));
    }
    // Where the JIT is unavailable (no JIT support, or executable memory
    // refused), pcre2_match interprets the pattern: slower, same pieces.
    (void)pcre2_jit_compile(pattern, PCRE2_JIT_COMPLETE);
    return new BpePretokenizer(new Code{pattern});
  }();
  return instance;
}

std::vector<std::string_view> BpePretokenizer::split(std::string_view text) const {
  const std::unique_ptr<pcre2_match_data, MatchDataFree> match(
      pcre2_match_data_create_from_pattern(code_->pattern, nullptr));
  if (!match) throw std::bad_alloc();
  const PCRE2_SIZE* bounds = pcre2_get_ovector_pointer(match.get());
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());

  std::vector<std::string_view> pieces;
  std::size_t offset = 0;
  while (offset < text.size()) {
    // Every alternative consumes at least one character, and every valid
    // character matches one of them, so a match starts past `offset` only
    // after bytes no match can take: invalid UTF-8. No match at all (or an
    // error, which this pattern's simple repeats do not reach) leaves the
    // rest as one such piece.
    const int rc =
        pcre2_match(code_->pattern, subject, text.size(), offset, 0, match.get(), nullptr);
    const std::size_t begin = rc > 0 ? bounds[0] : text.size();
    const std::size_t end = rc > 0 ? bounds[1] : text.size();
    if (begin > offset) pieces.push_back(text.substr(offset, begin - offset));
    if (end > begin) pieces.push_back(text.substr(begin, end - begin));
    offset = end;
  }
  return pieces;
}

}  // namespace kvtier
