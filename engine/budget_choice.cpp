#include "engine/budget_choice.h"

#include <algorithm>
#include <cstdio>

#include "engine/scheduler.h"

namespace kvtier {

namespace {

constexpr int kSmallestSweep = 16;
constexpr int kFallbackBudget = 16;  // the budget of old, with no sweep to choose from

std::string us_per_row(const PassCost& p) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.0f us a row", p.seconds / p.rows * 1e6);
  return buf;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  return buf;
}

// The smallest pass within kThroughputSlack of the best cost per row.
const PassCost& cheapest_enough(std::span<const PassCost> sweep, const PassCost** best) {
  *best = &*std::min_element(sweep.begin(), sweep.end(), [](const PassCost& a, const PassCost& b) {
    return a.seconds / a.rows < b.seconds / b.rows;
  });
  const double limit = (*best)->seconds / (*best)->rows * kThroughputSlack;
  for (const PassCost& p : sweep)
    if (p.seconds / p.rows <= limit) return p;
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
  if (requested.token_budget != SchedulerConfig::kAuto) {
    c.token_budget = requested.token_budget;
    c.mixed_prefill_tokens = requested.mixed_prefill_tokens != SchedulerConfig::kAuto
                                 ? requested.mixed_prefill_tokens
                                 : requested.token_budget;
    c.why = "token_budget " + std::to_string(c.token_budget) + " as set";
    return c;
  }
  c.automatic = true;
  if (sweep.empty()) {
    c.token_budget = std::max(batch, kFallbackBudget);
    c.mixed_prefill_tokens = requested.mixed_prefill_tokens != SchedulerConfig::kAuto
                                 ? requested.mixed_prefill_tokens
                                 : c.token_budget;
    c.why = "token_budget " + std::to_string(c.token_budget) + ": no pass could be measured";
    return c;
  }
  const PassCost* best = nullptr;
  const PassCost& chosen = cheapest_enough(sweep, &best);
  c.token_budget = std::max(batch, chosen.rows);
  c.why = "token_budget " + std::to_string(c.token_budget) + ": a pass of " +
          std::to_string(chosen.rows) + " rows costs " + us_per_row(chosen) + ", " +
          (&chosen == best ? std::string("the least")
                           : "within 5% of the least (" + us_per_row(*best) + " at " +
                                 std::to_string(best->rows) + " rows)") +
          " of passes of " + std::to_string(sweep.front().rows) + " to " +
          std::to_string(sweep.back().rows) + " rows (" + std::to_string(sweep.front().rows) +
          " rows: " + us_per_row(sweep.front()) + ")";
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
           ", the decodes alone " + ms(alone) + " (at most 3x)";
  return c;
}

}  // namespace kvtier
