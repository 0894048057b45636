// The math form of nanochat's calculator: Python 3's arithmetic over ints
// (held in int64) and floats, and Python's repr of a float.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "engine/model/nanochat/calculator_forms.h"

namespace kvtier::calculator_detail {
namespace {

// ---------------------------------------------------------------------------
// Python's repr(float) (float_repr: the shortest digits that read back, as
// _Py_dg_dtoa mode 0 gives them, laid out by format_float_short).

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";  // whatever its sign
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  // The shortest round-trip digits, as d.ddde±XX.
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  if (ec != std::errc()) return "nan";  // cannot happen: 64 bytes hold any double
  std::string_view text(buf, end - buf);
  std::string out;
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  const std::size_t e = text.find('e');
  std::string digits;
  for (const char c : text.substr(0, e))
    if (c != '.') digits += c;
  int exponent = 0;
  std::from_chars(text.data() + e + 1 + (text[e + 1] == '+'), text.data() + text.size(), exponent);
  // value = 0.d1d2... * 10^decpt
  const int decpt = exponent + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) out += '.' + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    const int magnitude = std::abs(exponent);
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt < n) {
    out += digits.substr(0, decpt) + '.' + digits.substr(decpt);
  } else {
    out += digits + std::string(decpt - n, '0') + ".0";
  }
  return out;
}

// ---------------------------------------------------------------------------
// The math form.

// A value of the math form: Python int (held in int64), float, the empty
// tuple (the only tuple: no commas get this far) or Ellipsis.
struct Value {
  enum Kind { kInt, kFloat, kTuple, kEllipsis } kind = kInt;
  std::int64_t i = 0;
  double f = 0;

  static Value of_int(std::int64_t v) { return {kInt, v, 0}; }
  static Value of_float(double v) { return {kFloat, 0, v}; }
  bool number() const { return kind == kInt || kind == kFloat; }
  // An int operand of a float operation: rounded to nearest, ties to even,
  // as PyLong_AsDouble does.
  double as_double() const { return kind == kInt ? static_cast<double>(i) : f; }
};

std::uint64_t magnitude(std::int64_t v) {
  return v < 0 ? ~static_cast<std::uint64_t>(v) + 1 : static_cast<std::uint64_t>(v);
}

// int / int: Python's long_true_divide, the exact quotient correctly
// rounded. Operands within 2^53 are exact doubles, so one IEEE division
// rounds once; beyond, a 128-bit quotient of at least 55 bits with a sticky
// bit for the remainder rounds the same way in one conversion.
std::optional<double> int_true_divide(std::int64_t a, std::int64_t b) {
  if (b == 0) return std::nullopt;
  constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
  const std::uint64_t ua = magnitude(a), ub = magnitude(b);
  if (ua == 0 || (ua <= kExact && ub <= kExact))
    return static_cast<double>(a) / static_cast<double>(b);
  const int shift =
      std::max(0, 55 + static_cast<int>(std::bit_width(ub)) - static_cast<int>(std::bit_width(ua)));
  const unsigned __int128 n = static_cast<unsigned __int128>(ua) << shift;
  // Below 2^56 when shifted, at most ua otherwise: fits 64 bits.
  const auto q = static_cast<std::uint64_t>(n / ub);
  const bool inexact = n % ub != 0;
  const double result = std::ldexp(static_cast<double>(q | (inexact ? 1 : 0)), -shift);
  return (a < 0) != (b < 0) ? -result : result;
}

// float // float: CPython's float_floor_div (_float_div_mod), step for step,
// so that signed zeros, inf and nan come out as Python's do.
std::optional<double> float_floor_divide(double vx, double wx) {
  if (wx == 0.0) return std::nullopt;
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  // The remainder takes the sign of the divisor (nan counts as nonzero).
  if (mod != 0.0 && (wx < 0) != (mod < 0)) div -= 1.0;
  if (div != 0.0) {
    // Snap to the nearest integral value.
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, vx / wx);  // the true quotient's sign
}

enum class Op { kAdd, kSub, kMul, kDiv, kFloorDiv };

std::optional<Value> binary(Op op, const Value& a, const Value& b) {
  if (!a.number() || !b.number()) {
    // Tuples concatenate and repeat; everything else is a TypeError.
    const bool ta = a.kind == Value::kTuple, tb = b.kind == Value::kTuple;
    if (op == Op::kAdd && ta && tb) return a;
    if (op == Op::kMul && ((ta && b.kind == Value::kInt) || (tb && a.kind == Value::kInt)))
      return Value{Value::kTuple};
    return std::nullopt;
  }
  if (a.kind == Value::kInt && b.kind == Value::kInt) {
    std::int64_t r = 0;
    switch (op) {
      case Op::kAdd:
        if (__builtin_add_overflow(a.i, b.i, &r)) return std::nullopt;
        return Value::of_int(r);
      case Op::kSub:
        if (__builtin_sub_overflow(a.i, b.i, &r)) return std::nullopt;
        return Value::of_int(r);
      case Op::kMul:
        if (__builtin_mul_overflow(a.i, b.i, &r)) return std::nullopt;
        return Value::of_int(r);
      case Op::kDiv: {
        const auto q = int_true_divide(a.i, b.i);
        if (!q) return std::nullopt;
        return Value::of_float(*q);
      }
      case Op::kFloorDiv: {
        if (b.i == 0) return std::nullopt;
        if (a.i == std::numeric_limits<std::int64_t>::min() && b.i == -1) return std::nullopt;
        r = a.i / b.i;
        if (a.i % b.i != 0 && (a.i < 0) != (b.i < 0)) --r;  // floor, not truncate
        return Value::of_int(r);
      }
    }
    return std::nullopt;
  }
  const double x = a.as_double(), y = b.as_double();
  switch (op) {
    case Op::kAdd:
      return Value::of_float(x + y);
    case Op::kSub:
      return Value::of_float(x - y);
    case Op::kMul:
      return Value::of_float(x * y);
    case Op::kDiv:
      if (y == 0.0) return std::nullopt;
      return Value::of_float(x / y);
    case Op::kFloorDiv: {
      const auto q = float_floor_divide(x, y);
      if (!q) return std::nullopt;
      return Value::of_float(*q);
    }
  }
  return std::nullopt;
}

std::optional<Value> unary(char sign, const Value& v) {
  if (v.kind == Value::kInt) {
    if (sign == '+') return v;
    if (v.i == std::numeric_limits<std::int64_t>::min()) return std::nullopt;
    return Value::of_int(-v.i);
  }
  if (v.kind == Value::kFloat) return sign == '+' ? v : Value::of_float(-v.f);
  return std::nullopt;  // -() and -... are TypeErrors
}

struct Token {
  enum Kind { kNumber, kPlus, kMinus, kStar, kSlash, kSlashSlash, kOpen, kClose, kOther, kEnd };
  Kind kind = kEnd;
  Value value;  // kNumber's
};

// A number literal at text[pos] (a digit, or '.' and a digit), as CPython's
// tokenizer reads it: "0"+ alone or with a fraction, a nonzero-led run of
// digits, or digits "." digits with either side optional. The tokenizer
// stops where the digits stop, so "1.2.3" is "1.2" then ".3".
std::optional<Value> number_literal(std::string_view text, std::size_t& pos) {
  const std::size_t start = pos;
  auto digits = [&] {
    while (pos < text.size() && is_digit(text[pos])) ++pos;
  };
  bool is_float = false;
  bool leading_zero = false;
  if (text[pos] == '.') {
    is_float = true;
    ++pos;
    digits();
  } else {
    leading_zero = text[pos] == '0';
    digits();
    if (pos < text.size() && text[pos] == '.') {
      is_float = true;
      ++pos;
      digits();
    }
  }
  const std::string_view literal = text.substr(start, pos - start);
  if (!is_float) {
    // Python 3 forbids leading zeros on a nonzero decimal int ("007"), not "000".
    if (leading_zero && literal.find_first_not_of('0') != std::string_view::npos)
      return std::nullopt;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), v);
    if (ec != std::errc() || end != literal.data() + literal.size()) return std::nullopt;
    return Value::of_int(v);
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), v);
  if (end != literal.data() + literal.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    // Python's float() of a literal gives inf past DBL_MAX and 0.0 below
    // the least subnormal, where from_chars gives only an error. A nonzero
    // digit before the point means a magnitude of at least 1: overflow.
    const std::string_view whole = literal.substr(0, literal.find('.'));
    v = whole.find_first_not_of('0') != std::string_view::npos
            ? std::numeric_limits<double>::infinity()
            : 0.0;
  } else if (ec != std::errc()) {
    return std::nullopt;
  }
  return Value::of_float(v);
}

// The tokens of a math-form text (only kMathChars), or nothing on a
// tokenizer error. kOther stands for what the grammar never accepts after
// an operand or operator: '.', "**".
std::optional<std::vector<Token>> math_tokens(std::string_view text) {
  std::vector<Token> tokens;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const char c = text[pos];
    const char next = pos + 1 < text.size() ? text[pos + 1] : '\0';
    Token t;
    if (c == ' ') {
      ++pos;
      continue;
    } else if (is_digit(c) || (c == '.' && is_digit(next))) {
      const auto v = number_literal(text, pos);
      if (!v) return std::nullopt;
      tokens.push_back({Token::kNumber, *v});
      continue;
    } else if (c == '.' && next == '.' && pos + 2 < text.size() && text[pos + 2] == '.') {
      t = {Token::kNumber, Value{Value::kEllipsis}};  // `...` is an operand
      pos += 3;
    } else if (c == '/' && next == '/') {
      t.kind = Token::kSlashSlash;
      pos += 2;
    } else if (c == '*' && next == '*') {
      t.kind = Token::kOther;
      pos += 2;
    } else {
      t.kind = c == '+'   ? Token::kPlus
               : c == '-' ? Token::kMinus
               : c == '*' ? Token::kStar
               : c == '/' ? Token::kSlash
               : c == '(' ? Token::kOpen
               : c == ')' ? Token::kClose
                          : Token::kOther;  // a lone '.'
      ++pos;
    }
    tokens.push_back(t);
  }
  tokens.push_back({Token::kEnd, {}});
  return tokens;
}

// Recursive descent over Python's arithmetic grammar:
//   expr   := term (('+' | '-') term)*
//   term   := factor (('*' | '/' | '//') factor)*
//   factor := ('+' | '-') factor | atom
//   atom   := NUMBER | '...' | '(' ')' | '(' expr ')'
// evaluating as it goes (Python evaluates left to right and any error is
// None, so evaluating eagerly finds the same answer). An atom followed by
// '(' is a call (a TypeError on every value here) and by '.' an attribute
// (a SyntaxError without letters).
class MathParser {
 public:
  explicit MathParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::optional<Value> parse() {
    auto v = expr(0);
    if (!v || peek() != Token::kEnd) return std::nullopt;
    return v;
  }

 private:
  Token::Kind peek() const { return tokens_[pos_].kind; }

  std::optional<Value> expr(int depth) {
    auto v = term(depth);
    while (v && (peek() == Token::kPlus || peek() == Token::kMinus)) {
      const Op op = tokens_[pos_++].kind == Token::kPlus ? Op::kAdd : Op::kSub;
      const auto rhs = term(depth);
      if (!rhs) return std::nullopt;
      v = binary(op, *v, *rhs);
    }
    return v;
  }

  std::optional<Value> term(int depth) {
    auto v = factor(depth);
    while (v &&
           (peek() == Token::kStar || peek() == Token::kSlash || peek() == Token::kSlashSlash)) {
      const Token::Kind kind = tokens_[pos_++].kind;
      const Op op = kind == Token::kStar    ? Op::kMul
                    : kind == Token::kSlash ? Op::kDiv
                                            : Op::kFloorDiv;
      const auto rhs = factor(depth);
      if (!rhs) return std::nullopt;
      v = binary(op, *v, *rhs);
    }
    return v;
  }

  std::optional<Value> factor(int depth) {
    if (peek() == Token::kPlus || peek() == Token::kMinus) {
      if (depth + 1 > kMaxDepth) return std::nullopt;
      const char sign = tokens_[pos_++].kind == Token::kPlus ? '+' : '-';
      const auto v = factor(depth + 1);
      if (!v) return std::nullopt;
      return unary(sign, *v);
    }
    return atom(depth);
  }

  std::optional<Value> atom(int depth) {
    std::optional<Value> v;
    if (peek() == Token::kNumber) {
      v = tokens_[pos_++].value;
    } else if (peek() == Token::kOpen) {
      if (depth + 1 > kMaxDepth) return std::nullopt;
      ++pos_;
      if (peek() == Token::kClose) {
        v = Value{Value::kTuple};
      } else {
        v = expr(depth + 1);
        if (!v || peek() != Token::kClose) return std::nullopt;
      }
      ++pos_;
    } else {
      return std::nullopt;
    }
    if (peek() == Token::kOpen || peek() == Token::kOther) return std::nullopt;
    return v;
  }

  std::vector<Token> tokens_;
  std::size_t pos_ = 0;
};

}  // namespace

std::optional<std::string> evaluate_math(std::string_view text) {
  auto tokens = math_tokens(text);
  if (!tokens) return std::nullopt;
  const auto v = MathParser(std::move(*tokens)).parse();
  if (!v) return std::nullopt;
  switch (v->kind) {
    case Value::kInt:
      return std::to_string(v->i);
    case Value::kFloat:
      return float_repr(v->f);
    case Value::kTuple:
      return "()";
    case Value::kEllipsis:
      return "Ellipsis";
  }
  return std::nullopt;
}

}  // namespace kvtier::calculator_detail
