#include "engine/model/nanochat/calculator.h"

#include <algorithm>
#include <string>

#include "engine/model/nanochat/calculator_forms.h"

namespace kvtier {
namespace {

constexpr std::size_t kMaxLength = 512;  // bytes, once the commas are gone
constexpr std::string_view kMathChars = "0123456789*+-/.() ";
constexpr std::string_view kStringChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"()._ ";
constexpr std::string_view kDangerous[] = {
    "__",      "import", "exec", "eval", "compile", "open",    "file",    "input",  "raw_input",
    "globals", "locals", "vars", "dir",  "getattr", "setattr", "delattr", "hasattr"};

bool only(std::string_view text, std::string_view allowed) {
  return std::ranges::all_of(text,
                             [&](char c) { return allowed.find(c) != std::string_view::npos; });
}

std::optional<std::string> evaluate(std::string_view expression) {
  // Commas go first; count what is left before copying, so a huge input
  // costs one pass and no allocation.
  const auto kept =
      static_cast<std::size_t>(std::ranges::count_if(expression, [](char c) { return c != ','; }));
  if (kept > kMaxLength) return std::nullopt;
  std::string expr;
  expr.reserve(kept);
  for (const char c : expression)
    if (c != ',') expr += c;

  if (only(expr, kMathChars)) {
    if (expr.find("**") != std::string::npos) return std::nullopt;
    return calculator_detail::evaluate_math(expr);
  }
  if (!only(expr, kStringChars)) return std::nullopt;
  std::string lower = expr;
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  for (const std::string_view pattern : kDangerous)
    if (lower.find(pattern) != std::string::npos) return std::nullopt;
  if (expr.find(".count(") == std::string::npos) return std::nullopt;
  return calculator_detail::evaluate_string_form(expr);
}

}  // namespace

std::optional<std::string> calculator_evaluate(std::string_view expression) noexcept {
  try {
    return evaluate(expression);
  } catch (...) {
    return std::nullopt;  // only an allocation failing could get here
  }
}

}  // namespace kvtier
