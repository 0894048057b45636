// nanochat's calculator tool (nanochat/engine.py, use_calculator): when the
// model writes <|python_start|>EXPR<|python_end|>, nanochat evaluates EXPR
// and forces <|output_start|>str(result)<|output_end|> into the stream, or
// nothing where use_calculator returns None. nanochat calls Python's eval
// (no builtins, any exception -> None, 3 s alarm); this is our own evaluator
// of the part of Python that gets past its filters, giving the same text.
//
// The filters, in nanochat's order:
//   1. Every ',' is removed (so "1,000" is 1000, and "1,2" is 12).
//   2. Only "0123456789*+-/.() ": the math form, refused if it holds "**".
//   3. Else only letters, digits, quotes, "()._ " are allowed; refused if the
//      lowercased text holds any of __ import exec eval compile open file
//      input raw_input globals locals vars dir getattr setattr delattr
//      hasattr (even inside a string: "directory" holds "dir"), or lacks
//      ".count(": the string form.
//
// The math form is Python 3 expression syntax over + - * / // with unary
// + and -, parentheses, int and float literals (no exponent: no letters),
// `()` (the empty tuple) and `...` (Ellipsis, printed "Ellipsis"). As in
// Python: `007` is a SyntaxError but `00` and `007.5` are fine; `1..2` and
// `1 .5` are two numbers in a row (SyntaxError); `/` is true division
// (int/int correctly rounded to a double); `//` floors (-7//2 == -4, and on
// floats CPython's float_floor_div, signed zeros included); division by
// zero is an error; float + - * may overflow to inf or make nan; `() + ()`
// and `() * 3` are `()`; calling anything (`(1)(2)`) is a TypeError.
// Floats print as Python's repr: the shortest digits that read back,
// fixed notation for 1e-4 <= |x| < 1e16 ("2.0", "0.0001"), else
// "1e+16", "1.5e-05"; "inf", "-inf", "nan", "-0.0".
//
// The string form is STRING.count(STRING) (whitespace and parentheses
// allowed around the operands, the method and the whole, as in
// ('.count(' . count)('.')): Python's str.count, counting
// non-overlapping occurrences left to right ('aaa'.count('aa') == 1,
// 'abc'.count('') == 4). A STRING is one or more adjacent literals
// ('ab' "c" is "abc"), in ' or " or triple quotes, with an optional prefix
// r u f b rb br fr rf in any case (no backslash or brace can get past the
// filter, so none changes the text); bytes count bytes, or a byte given
// as an int (b'a'.count(b'a'.count(b'a')) counts byte 1), and mixing bytes
// with str is an error as in Python. A string with no call prints itself
// ('x.count(' gives "x.count("), bytes as their repr (b'x.count(').
//
// Bounds (Python has none but its 3 s alarm): at most 512 bytes once the
// commas are gone, at most 64 levels of parentheses and unary signs
// together. So time and memory are linear in the input and the recursion
// is shallow, with no timer. Never throws or aborts, whatever the bytes.
//
// Where this deliberately gives nothing and Python would give a result:
//   - an int literal or any int along the way outside int64 (Python's ints
//     are unbounded: `99999999999*99999999999`, `-9223372036854775808`,
//     whose literal 9223372036854775808 is out of range, or an
//     intermediate that a later division brings back into range);
//   - longer than 512 bytes, or nested deeper than 64 (Python's parser
//     allows 200 parentheses and some thousands of unary signs);
//   - in the string form, anything but literals and .count: other methods
//     ('ab'.upper().count('A')), keywords and constants (not, and, or,
//     if-else, in, True, None), numbers, tuples (().count(1) is 0 there);
//     and a bound count left uncalled, which Python prints with its
//     address (<built-in method count of str object at 0x...>).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvtier {

// Returns str(result) as Python would print it, or std::nullopt where
// nanochat's use_calculator returns None (or where a bound above applies).
// Takes any bytes; thread-safe (no state).
std::optional<std::string> calculator_evaluate(std::string_view expression) noexcept;

}  // namespace kvtier
