// Token budgets that fit the device: chosen from what passes of each size
// cost on it, measured at start-up (Scheduler::create's sweep).
//
// A pass's rows share one read of the weights, so small passes waste the
// device: on a 2-core CPU a 16-row pass of GPT-2 124M costs 1.5x per row
// what a 256-row one does, on an H200 11x what a 1024-row one does. A fixed
// default of 16 tokens a pass made a cold 1024-token prompt 2.7x (CPU) to
// 12x (GPU) slower than it need be. Larger is not free either: a prefill
// chunk shares its pass with the decodes of the running requests, which
// wait for all of it. So two budgets, as llama.cpp's n_batch and vLLM's
// chunked prefill have them:
//
//   token_budget          rows of a pass: the pass whose cost per row of a
//                         full-context prompt (its own, and its attention
//                         to the passes before it) is least, the smaller of
//                         two within kThroughputSlack;
//   mixed_prefill_tokens  prompt tokens a pass takes beside running decodes:
//                         the most that keep such a pass, the chunk at the
//                         end of a full context, within kItlStretch times a
//                         decode step of max_batch_size rows alone, so the
//                         running requests' inter-token latency stretches at
//                         most that much while a long prompt prefills.
//
// An explicit setting always wins; mixed_prefill_tokens is chosen only with
// an automatic token_budget (with an explicit one, its automatic value is
// the budget's own share: no cap, as before). Pure functions: the daemon
// resolves what config.get shows with the same call the scheduler makes.
#pragma once

#include <string>
#include <vector>

#include "engine/cache/cost_model.h"

namespace kvtier {

struct SchedulerConfig;

// The least cost per row, the smaller of two within 1% of each other. A
// wider window ("the smallest within 10%") leans to its edge, and a start-up
// measurement on a shared 2-core VM is off by 5-10% besides: passes of 128
// rows that measured within 3% of the least cost 10-15% more over a long
// prompt, in the median of five rounds against 512 and 1024 (ttft_bench).
// A larger pass costs little else: a prompt's chunks are prefilled in
// order whatever their size, and beside running decodes
// mixed_prefill_tokens caps them.
inline constexpr double kThroughputSlack = 1.01;
// A decode step beside a prefill chunk: at most 2.5x as long as alone, by
// the sweep's figures. The target is 3x at the running requests' p99
// inter-token latency; the estimate does not see the pass that admits the
// prompt or what else the machine does, which put the p99 at 3.2x where the
// figures said 3x (ttft_bench, 2 cores).
inline constexpr double kItlStretch = 2.5;

// The pass sizes a sweep measures, fewest rows first: 16, 32, 64, ... up to
// `most` (the context, and what the pool holds); just `most` when it is
// below 16. Empty when `most` < 1.
std::vector<int> sweep_sizes(int most);

// What the start-up sweep measured.
struct PassSweep {
  // The median cost of a fresh pass (positions from 0) by its rows,
  // ascending: TierCosts::prefill's points.
  std::vector<PassCost> passes;
  // What one row's attention over one more cached key adds to a pass (a
  // 64-row pass after a long prefix against one without): a chunk at the
  // end of a long prompt costs more than a fresh pass of its rows.
  double seconds_per_row_key = 0;
  int context = 0;  // the model's, in positions
};

struct BudgetChoice {
  int token_budget = 0;
  int mixed_prefill_tokens = 0;
  bool automatic = false;  // token_budget was chosen here
  std::string why;         // one line for the start-up log and config.get
};

// The budgets in force for `requested` (SchedulerConfig::kAuto where the
// scheduler chooses) from `sweep`. With no pass measured an automatic
// token_budget is max(max_batch_size, 16), as before.
BudgetChoice resolve_budgets(const SchedulerConfig& requested, const PassSweep& sweep);

}  // namespace kvtier
