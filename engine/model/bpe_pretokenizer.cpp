#include "engine/model/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <new>

namespace kvtier {
namespace {

constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Bounds on one match's work: far above what a pre-tokenizer pattern needs
// on any piece (GPT-2's and nanochat's never backtrack more than a character
// or two), low enough that a pathological pattern fails fast instead.
constexpr std::uint32_t kMatchLimit = 10'000'000;
constexpr std::uint32_t kDepthLimit = 10'000;

// \s -> \p{White_Space}, \S -> \P{White_Space}; every other escape as written.
std::string white_space_spelled_out(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char escaped = pattern[++i];
    if (escaped == 's')
      out += R"(\p{White_Space})";
    else if (escaped == 'S')
      out += R"(\P{White_Space})";
    else
      (out += '\\') += escaped;
  }
  return out;
}

struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

struct BpePretokenizer::Code {
  pcre2_code* pattern = nullptr;
  pcre2_match_context* limits = nullptr;
  ~Code() {
    pcre2_match_context_free(limits);
    pcre2_code_free(pattern);
  }
};

BpePretokenizer::~BpePretokenizer() { delete code_; }

std::expected<std::unique_ptr<BpePretokenizer>, std::string> BpePretokenizer::compile(
    std::string_view pattern) {
  const std::string spelled = white_space_spelled_out(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is skipped over instead of failing the
  // whole match (PCRE2 10.34+), which is what lets split() keep such bytes.
  auto code = std::make_unique<Code>();
  code->pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                &error_offset, nullptr);
  if (code->pattern == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return std::unexpected("the split pattern does not compile in PCRE2 (" +
                           std::string(reinterpret_cast<const char*>(message)) + ", near offset " +
                           std::to_string(error_offset) +
                           " of the pattern with \\s spelled \\p{White_Space})");
  }
  code->limits = pcre2_match_context_create(nullptr);
  if (code->limits == nullptr) throw std::bad_alloc();
  pcre2_set_match_limit(code->limits, kMatchLimit);
  pcre2_set_depth_limit(code->limits, kDepthLimit);
  // Where the JIT is unavailable (no JIT support, or executable memory
  // refused), pcre2_match interprets the pattern: slower, same pieces.
  (void)pcre2_jit_compile(code->pattern, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<BpePretokenizer>(new BpePretokenizer(code.release()));
}

std::expected<const BpePretokenizer*, std::string> BpePretokenizer::gpt2() {
  // Compiled once; the compiled pattern is read-only, so threads share it.
  static const std::expected<const BpePretokenizer*, std::string> instance =
      []() -> std::expected<const BpePretokenizer*, std::string> {
    auto compiled = compile(kGpt2Pattern);
    if (!compiled)
      return std::unexpected("GPT-2's pre-tokenizer: " + compiled.error() +
                             " (is PCRE2 built with Unicode support?)");
    return compiled->release();  // lives as long as the process
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
    // A match starts past `offset` only after text no match takes (invalid
    // UTF-8, or characters the pattern leaves). No match at all, or an error
    // (a limit reached), leaves the rest as one such piece. NOTEMPTY: an
    // empty match would never move `offset` on.
    const int rc = pcre2_match(code_->pattern, subject, text.size(), offset, PCRE2_NOTEMPTY,
                               match.get(), code_->limits);
    const std::size_t begin = rc > 0 ? bounds[0] : text.size();
    const std::size_t end = rc > 0 ? bounds[1] : text.size();
    if (begin > offset) pieces.push_back(text.substr(offset, begin - offset));
    if (end > begin) pieces.push_back(text.substr(begin, end - begin));
    offset = end;
  }
  return pieces;
}

}  // namespace kvtier
