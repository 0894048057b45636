// The two forms of expression nanochat's use_calculator lets through
// (calculator.h has the rules): each parsed and evaluated by its own file.
// Internal to the calculator; calculator.cpp applies the filters and picks
// the form.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvtier::calculator_detail {

// Parentheses and unary signs (or nested calls) together: the recursion's
// bound in both forms.
inline constexpr int kMaxDepth = 64;

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Text of only "0123456789*+-/.() " without "**": Python's str(eval(text)),
// or nothing (calculator_math.cpp).
std::optional<std::string> evaluate_math(std::string_view text);

// Text that passed the string form's filters: STRING.count(STRING) and the
// rest of calculator.h's slice, or nothing (calculator_string.cpp).
std::optional<std::string> evaluate_string_form(std::string_view text);

}  // namespace kvtier::calculator_detail
