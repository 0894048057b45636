#include "engine/scheduling/budget_choice.h"

#include <algorithm>
#include <cstdio>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

namespace {

constexpr int kSmallestSweep = 16;
constexpr int kFallbackBudget = 16;  // the budget of old, with no sweep to choose from

// What a row of a full-context prompt costs when it is prefilled in passes
// of p.rows: the pass's own cost per row (its attention within itself
// included), and its attention to the keys of the passes before it, (L -
// rows) / 2 of them on average. Compared as fresh passes, a large pass
// carries more of the prompt's attention than a small one and looks dearer
// than it is: on 2 cores a 1024-token prompt took 1.9 s in passes of 128
// and 1.6 s in one pass, whose fresh costs per row were 1464 and 1564 us.
double prompt_per_row(const PassCost& p, const PassSweep& s) {
  return p.seconds / p.rows + s.seconds_per_row_key * std::max(0, s.context - p.rows) / 2.0;
}

std::string us_a_row(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.0f us a row", seconds * 1e6);
  return buf;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  return buf;
}

// The smallest pass within kThroughputSlack of the least cost per row of a
// full-context prompt.
const PassCost& cheapest_enough(const PassSweep& s, const PassCost** best) {
  auto cost = [&](const PassCost& p) { return prompt_per_row(p, s); };
  *best = &*std::ranges::min_element(s.passes, {}, cost);
  const double limit = cost(**best) * kThroughputSlack;
  for (const PassCost& p : s.passes)
    if (cost(p) <= limit) return p;
  return **best;
}

}  // namespace

std::vector<int> sweep_sizes(int most) {
  // Powers of two only: each size is a class of its own in the cost model.
  std::vector<int> sizes;
  for (int rows = kSmallestSweep; rows <= most; rows *= 2) sizes.push_back(rows);
  if (sizes.empty() && most >= 1) sizes.push_back(most);
  return sizes;
}

BudgetChoice resolve_budgets(const SchedulerConfig& requested, const PassSweep& measured) {
  const std::vector<PassCost>& sweep = measured.passes;
  BudgetChoice c;
  const int batch = requested.max_batch_size;
  // mixed_prefill_tokens as set, or else `otherwise`.
  auto mixed_or = [&](int otherwise) {
    return requested.mixed_prefill_tokens != SchedulerConfig::kAuto ? requested.mixed_prefill_tokens
                                                                    : otherwise;
  };
  if (requested.token_budget != SchedulerConfig::kAuto) {
    c.token_budget = requested.token_budget;
    c.mixed_prefill_tokens = mixed_or(requested.token_budget);
    c.why = "token_budget " + std::to_string(c.token_budget) + " as set";
    return c;
  }
  c.automatic = true;
  if (sweep.empty()) {
    c.token_budget = std::max(batch, kFallbackBudget);
    c.mixed_prefill_tokens = mixed_or(c.token_budget);
    c.why = "token_budget " + std::to_string(c.token_budget) + ": no pass could be measured";
    return c;
  }
  const PassCost* best = nullptr;
  const PassCost& chosen = cheapest_enough(measured, &best);
  c.token_budget = std::max(batch, chosen.rows);
  const std::string prompt = "a " + std::to_string(measured.context) + "-token prompt";
  c.why =
      "token_budget " + std::to_string(c.token_budget) + ": " + prompt + " in passes of " +
      std::to_string(chosen.rows) + " rows costs " + us_a_row(prompt_per_row(chosen, measured)) +
      ", " +
      (&chosen == best ? std::string("the least")
                       : "within 1% of the least (" + us_a_row(prompt_per_row(*best, measured)) +
                             " in passes of " + std::to_string(best->rows) + ")") +
      " of passes of " + std::to_string(sweep.front().rows) + " to " +
      std::to_string(sweep.back().rows) + " rows (" + std::to_string(sweep.front().rows) + ": " +
      us_a_row(prompt_per_row(sweep.front(), measured)) + ")";
  if (requested.mixed_prefill_tokens != SchedulerConfig::kAuto) {
    c.mixed_prefill_tokens = requested.mixed_prefill_tokens;
    c.why += "; mixed_prefill_tokens " + std::to_string(c.mixed_prefill_tokens) + " as set";
    return c;
  }
  // The worst chunk: the last of a full context, its rows attending to all
  // of it.
  TierCosts curve;
  curve.prefill = sweep;
  const double alone = curve.pass_seconds(batch);
  auto beside = [&](int chunk) {
    return curve.pass_seconds(batch + chunk) +
           measured.seconds_per_row_key * chunk * std::max(measured.context, chunk);
  };
  int chunk = c.token_budget;
  while (chunk > 1 && beside(chunk) > kItlStretch * alone) --chunk;
  c.mixed_prefill_tokens = chunk;
  c.why += "; mixed_prefill_tokens " + std::to_string(chunk) + ": " + std::to_string(batch) +
           " decodes and the last " + std::to_string(chunk) + " tokens of a " +
           std::to_string(measured.context) + "-token prompt take " + ms(beside(chunk)) +
           ", the decodes alone " + ms(alone) + " (at most 2.5x)";
  return c;
}

}  // namespace kvtier
