// Measuring the device at start-up: what passes of each size cost (the
// sweep behind automatic token budgets and the cost model's prefill curve)
// and what the tiers' loads cost; and the budgets in force.
#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

// Rounds of the sweep, each one pass of every size, interleaved so that a
// machine whose speed drifts (a shared VM) shifts every size alike. A size
// whose pass takes longer than kLongPass is measured once (a 1024-row pass
// of GPT-2 124M takes 1.5 s on 2 cores, and the sweep delays start-up): a
// wild sample there moves the choice among large budgets, which differ
// little. The smaller sizes, which a lucky sample could make look as good
// as the best, get the median of kRounds. The cost model's windows outvote
// any wild sample as real passes come in.
constexpr int kRounds = 3;
constexpr double kLongPass = 0.4;
constexpr double kSweepSeconds = 8;  // no round starts after this
// Activations grow with the rows; no model we serve has a longer context.
constexpr int kMostSweepRows = 4096;
// The rows of the passes timed after a long prefix and without it, side by
// side (a difference of a few tens of ms is lost in the noise of passes
// timed apart), for what attention over the prefix costs; and how many pairs.
constexpr int kDepthRows = 64;
constexpr int kDepthPairs = 3;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

void Scheduler::measure_pass_sizes() {
  sweep_ = {};
  sweep_.context = context_;
  const int P = config_.page_size;
  const int room = std::min(context_, pool_->num_free() * P);
  std::vector<int> sizes = sweep_sizes(std::min(room, kMostSweepRows));
  if (sizes.empty()) return;
  const std::vector<int> tokens(static_cast<std::size_t>(std::max(sizes.back(), kDepthRows)), 0);
  // Times one pass of `rows` rows appended to kv (fresh pages), or nothing
  // if it could not run.
  auto pass = [&](SequenceKv& kv, int rows) -> std::optional<double> {
    if (!kv.reserve(*pool_, kv.length() + rows)) return std::nullopt;
    // Token 0 throughout, so the token before any position is 0 too.
    const Model::Chunk chunk{&kv, std::span(tokens).first(static_cast<std::size_t>(rows)), false,
                             nullptr, kv.length() > 0 ? 0 : -1};
    const auto start = Clock::now();
    const bool ok = forward_.run(std::span(&chunk, 1), *pool_, {}).has_value();
    if (!ok) return std::nullopt;
    return since(start);
  };
  // A first pass of the most rows grows the forward's activations to their
  // largest and faults their pages in: not a measurement. (Measured as they
  // grew, each size's first pass paid for its growth, and the large ones,
  // timed once, looked 10-20% dearer than they are.)
  {
    SequenceKv kv(P);
    const bool ok = pass(kv, sizes.back()).has_value();
    kv.release(*pool_);
    if (!ok) return;
  }
  // The prefix the deep passes follow: the longest size that leaves them room.
  int prefix = 0;
  for (int rows : sizes)
    if (rows + kDepthRows <= room) prefix = rows;
  CostModel sweep;                          // the medians of each size's passes
  std::vector<double> deeper;               // what each pair's pass after the prefix took more
  std::vector<double> first(sizes.size());  // each size's first pass
  const auto start = Clock::now();
  bool failed = false;  // a pass could not run: what was measured stands
  for (int round = 0; !failed && round < kRounds && (round == 0 || since(start) < kSweepSeconds);
       ++round) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const int rows = sizes[i];
      if (round > 0 && first[i] > kLongPass) continue;
      SequenceKv kv(P);
      const auto took = pass(kv, rows);
      // The same rows after this prefix and fresh: what attending to it adds.
      for (int d = 0; took && round == 0 && rows == prefix && d < kDepthPairs; ++d) {
        SequenceKv after = kv.fork(*pool_), fresh(P);
        const auto a = pass(after, kDepthRows);
        const auto f = pass(fresh, kDepthRows);
        if (a && f) deeper.push_back(*a - *f);
        after.release(*pool_);
        fresh.release(*pool_);
      }
      kv.release(*pool_);
      if (!took) {
        failed = true;
        break;
      }
      sweep.add_prefill(*took, rows);
      if (cache_) cache_->cost_model().add_prefill(*took, rows);
      if (round == 0) first[i] = *took;
    }
  }
  sweep_.passes = sweep.costs().prefill;
  if (!deeper.empty()) {
    std::ranges::nth_element(deeper, deeper.begin() + static_cast<long>(deeper.size() / 2));
    // Each row attends to the prefix and to about half the rows.
    sweep_.seconds_per_row_key =
        std::max(0.0, deeper[deeper.size() / 2]) / (kDepthRows * (prefix + kDepthRows / 2.0));
  }
}

void Scheduler::apply_budgets(const SchedulerConfig& config) {
  budget_choice_ = resolve_budgets(config, sweep_);
  config_ = config;
  config_.token_budget = budget_choice_.token_budget;
  config_.mixed_prefill_tokens = budget_choice_.mixed_prefill_tokens;
}

int Scheduler::prefill_room(int decodes) const {
  const int room = config_.token_budget - decodes;
  return decodes > 0 ? std::min(room, config_.mixed_prefill_tokens) : room;
}

PrefillShape Scheduler::prefill_shape() const {
  const int decodes =
      static_cast<int>(std::count_if(admitted_.begin(), admitted_.end(), [](const Request* r) {
        return r->status_ == RequestStatus::kRunning;
      }));
  return {std::max(1, prefill_room(decodes)), decodes};
}

void Scheduler::calibrate_tier_costs() {
  if (!cache_) return;
  if (sweep_.passes.empty()) measure_pass_sizes();
  (void)cache_->calibrate();
}

}  // namespace kvtier
