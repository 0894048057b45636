#include "engine/model/tool_use.h"

#include <string_view>

#include "engine/model/nanochat/calculator.h"

namespace kvtier {

std::optional<ToolUse> ToolUse::of(const TokenizerSpec& tokenizer) {
  auto id = [&](std::string_view text) { return special_token_id(tokenizer.special_tokens, text); };
  const auto python_start = id("<|python_start|>"), python_end = id("<|python_end|>"),
             output_start = id("<|output_start|>"), output_end = id("<|output_end|>");
  if (!python_start || !python_end || !output_start || !output_end) return std::nullopt;
  return ToolUse(Markers{*python_start, *python_end, *output_start, *output_end});
}

std::optional<int> ToolUse::take_forced() {
  if (forced_.empty()) return std::nullopt;
  const int token = forced_.front();
  forced_.pop_front();
  return token;
}

// nanochat's order: a start opens an expression (dropping one left open), an
// end closes the open one, any other token inside is part of it. Forced
// tokens are observed too; none of them is a start or an end.
void ToolUse::observe(int token, const Tokenizer& tokenizer) {
  if (token == markers_.python_start) {
    in_expression_ = true;
    expression_.clear();
  } else if (token == markers_.python_end && in_expression_) {
    in_expression_ = false;
    if (!expression_.empty()) {
      const auto result = calculator_evaluate(tokenizer.decode(expression_));
      if (result) {
        // A result is digits, signs, points, letters or quoted ASCII: text
        // every byte-level vocabulary encodes.
        if (auto encoded = tokenizer.encode(*result)) {
          forced_.push_back(markers_.output_start);
          forced_.insert(forced_.end(), encoded->begin(), encoded->end());
          forced_.push_back(markers_.output_end);
        }
      }
    }
    expression_.clear();
  } else if (in_expression_) {
    expression_.push_back(token);
  }
}

}  // namespace kvtier
