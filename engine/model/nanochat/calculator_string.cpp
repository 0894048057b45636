// The string form of nanochat's calculator: string and bytes literals and
// their .count, as Python evaluates them.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "engine/model/nanochat/calculator_forms.h"

namespace kvtier::calculator_detail {
namespace {

// A value of the string form: a str, a bytes, an int (a count), or the
// bound method .count of a str or a bytes (`text` is its receiver's).
struct Text {
  enum Kind { kStr, kBytes, kInt, kStrCount, kBytesCount } kind = kStr;
  std::string text;
  std::int64_t i = 0;
};

// Python's repr(bytes) for bytes of allowed characters: b'...', in double
// quotes where that spares escaping a single quote.
std::string bytes_repr(const std::string& bytes) {
  const bool has_single = bytes.find('\'') != std::string::npos;
  const char quote = has_single && bytes.find('"') == std::string::npos ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (const char c : bytes) {
    if (c == quote) out += '\\';
    out += c;
  }
  out += quote;
  return out;
}

// Python's str.count / bytes.count with one argument.
std::int64_t count(std::string_view haystack, std::string_view needle) {
  if (needle.empty()) return static_cast<std::int64_t>(haystack.size()) + 1;
  std::int64_t n = 0;
  for (std::size_t at = haystack.find(needle); at != std::string_view::npos;
       at = haystack.find(needle, at + needle.size()))
    ++n;
  return n;
}

// Recursive descent over the supported slice of Python:
//   top     := primary END
//   primary := atom ('.' NAME | '(' primary ')')*
//   atom    := STRING+ | '(' primary ')'
// where STRING is a literal as CPython's tokenizer reads it, NAME must be
// count on a str or bytes, and only a bound count may be called (so
// ('ab'.count)('a') works as in Python). Anything else (names, numbers,
// other methods, keywords) gives nothing.
class StringParser {
 public:
  explicit StringParser(std::string_view text) : text_(text) {}

  std::optional<Text> parse() {
    auto v = primary(0);
    skip_spaces();
    if (!v || pos_ != text_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip_spaces() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }

  bool eat(char c) {
    skip_spaces();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  }
  static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

  // The name at pos_ (skipping spaces), consumed; empty if none.
  std::string_view name() {
    skip_spaces();
    const std::size_t start = pos_;
    if (pos_ < text_.size() && is_name_start(text_[pos_]))
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // A string literal at pos_ (after spaces): kFound with its text and
  // whether it is bytes, kNone (pos_ unmoved) where none starts there, or
  // kError where one starts but is no literal (a bad prefix: a name then a
  // string) or does not end.
  enum class Scan { kFound, kNone, kError };
  struct Literal {
    bool bytes = false;
    std::string_view text;
  };
  Scan literal(Literal& out) {
    skip_spaces();
    const std::size_t start = pos_;
    std::size_t at = pos_;
    while (at < text_.size() && is_name_char(text_[at])) ++at;
    if (at >= text_.size() || (text_[at] != '\'' && text_[at] != '"')) return Scan::kNone;
    std::string prefix(text_.substr(start, at - start));
    for (char& c : prefix) c = static_cast<char>(c | 0x20);  // ASCII letters to lower case
    static constexpr std::string_view kPrefixes[] = {"",   "r",  "u",  "f", "b",
                                                     "br", "rb", "fr", "rf"};
    if (std::ranges::find(kPrefixes, prefix) == std::end(kPrefixes)) return Scan::kError;
    // No newline or backslash gets past the filter: a literal ends at the
    // next quote, or the next three for a triple-quoted one.
    const std::string quote(text_.substr(at, 3) == std::string(3, text_[at]) ? 3 : 1, text_[at]);
    const std::size_t open = at + quote.size();
    const std::size_t close = text_.find(quote, open);
    if (close == std::string_view::npos) return Scan::kError;
    pos_ = close + quote.size();
    out = {prefix.find('b') != std::string::npos, text_.substr(open, close - open)};
    return Scan::kFound;
  }

  std::optional<Text> atom(int depth) {
    if (eat('(')) {
      auto v = primary(depth + 1);
      if (!v || !eat(')')) return std::nullopt;
      return v;
    }
    // Adjacent literals concatenate; bytes and str do not mix.
    std::optional<Text> v;
    Literal lit;
    for (Scan scan; (scan = literal(lit)) != Scan::kNone;) {
      if (scan == Scan::kError) return std::nullopt;
      const Text::Kind kind = lit.bytes ? Text::kBytes : Text::kStr;
      if (!v)
        v = Text{kind, std::string(lit.text)};
      else if (v->kind != kind)
        return std::nullopt;
      else
        v->text += lit.text;
    }
    return v;
  }

  // An attribute: .count of a str or bytes, else nothing (an int has no
  // count; other methods are not supported).
  static std::optional<Text> attribute(Text v, std::string_view attr) {
    if (attr != "count" || (v.kind != Text::kStr && v.kind != Text::kBytes)) return std::nullopt;
    v.kind = v.kind == Text::kStr ? Text::kStrCount : Text::kBytesCount;
    return v;
  }

  // A call with one argument: only a bound count is callable.
  static std::optional<Text> call(const Text& f, const Text& arg) {
    if (f.kind == Text::kStrCount && arg.kind == Text::kStr)
      return Text{Text::kInt, {}, count(f.text, arg.text)};
    if (f.kind == Text::kBytesCount && arg.kind == Text::kBytes)
      return Text{Text::kInt, {}, count(f.text, arg.text)};
    if (f.kind == Text::kBytesCount && arg.kind == Text::kInt) {
      // bytes.count(int) counts that byte (0..255, else ValueError).
      if (arg.i < 0 || arg.i > 255) return std::nullopt;
      const char byte = static_cast<char>(arg.i);
      return Text{Text::kInt, {}, count(f.text, std::string_view(&byte, 1))};
    }
    return std::nullopt;  // str with bytes or int, or a call on a non-callable: TypeError
  }

  // `depth`: the parentheses (grouping or a call's) around it.
  std::optional<Text> primary(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    auto v = atom(depth);
    while (v) {
      if (eat('.')) {
        v = attribute(std::move(*v), name());
      } else if (eat('(')) {
        // One argument; none, or a second (which would need a comma, and
        // the commas are gone), is a TypeError or a SyntaxError.
        const auto arg = primary(depth + 1);
        if (!arg || !eat(')')) return std::nullopt;
        v = call(*v, *arg);
      } else {
        break;
      }
    }
    return v;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::string> evaluate_string_form(std::string_view text) {
  const auto v = StringParser(text).parse();
  if (!v) return std::nullopt;
  switch (v->kind) {
    case Text::kStr:
      return v->text;
    case Text::kBytes:
      return bytes_repr(v->text);
    case Text::kInt:
      return std::to_string(v->i);
    case Text::kStrCount:
    case Text::kBytesCount:
      // Python prints "<built-in method count of str object at 0x...>",
      // an address we cannot reproduce.
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace kvtier::calculator_detail
