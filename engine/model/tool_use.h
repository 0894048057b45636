// A model's tool calls, run by the engine as nanochat's engine runs them
// (notes/nanochat.md §3): when the model writes
//   <|python_start|> expression <|python_end|>
// the expression's tokens are decoded and evaluated by the calculator
// (engine/model/nanochat/calculator.h), and, when it gives a result, the
// next tokens of the request are forced to
//   <|output_start|> tokens of the result <|output_end|>
// one a step, instead of sampled; then sampling goes on. An expression the
// calculator refuses forces nothing. The calculator is the only tool a
// family has today; a vocabulary without the four markers has none.
//
// Determinism: what is forced depends on the request's own tokens only, and
// a forced step draws no random number, so a request's tokens stay the
// same whatever the batch, tier, preemption or restart. One ToolUse per
// request (a forked sample starts from fresh()); not thread-safe.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

namespace kvtier {

class ToolUse {
 public:
  // The tool of a vocabulary with nanochat's four tool markers; nothing for
  // any other.
  static std::optional<ToolUse> of(const TokenizerSpec& tokenizer);

  // The state of a request that has generated nothing yet.
  ToolUse fresh() const { return ToolUse(markers_); }

  // The token to emit next instead of sampling one, taken off the queue;
  // nothing when the model samples.
  std::optional<int> take_forced();

  // Every token the request emits, sampled or forced, in order.
  void observe(int token, const Tokenizer& tokenizer);

 private:
  struct Markers {
    int python_start, python_end, output_start, output_end;
  };
  explicit ToolUse(Markers markers) : markers_(markers) {}

  Markers markers_;
  bool in_expression_ = false;
  std::vector<int> expression_;
  std::deque<int> forced_;
};

}  // namespace kvtier
