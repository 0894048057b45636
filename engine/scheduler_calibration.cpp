// Measuring the device at start-up: what passes of each size cost (the
// sweep behind automatic token budgets and the cost model's prefill curve)
// and what the tiers' loads cost; and the budgets in force.
#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/scheduler.h"

namespace kvtier {

namespace {

using Clock = std::chrono::steady_clock;

// Passes per size, and the time after which a size takes no more: a 1024-row
// pass of GPT-2 124M takes 1.5 s on 2 cores, and the sweep delays start-up.
// The cost model's windows outvote a wild sample as real passes come in.
constexpr int kPassesPerSize = 3;
constexpr double kSecondsPerSize = 0.5;
// Activations grow with the rows; no model we serve has a longer context.
constexpr int kMostSweepRows = 4096;

}  // namespace

void Scheduler::measure_pass_sizes() {
  sweep_.clear();
  const int P = config_.page_size;
  const int most = std::min({context_, pool_->num_free() * P, kMostSweepRows});
  const std::vector<int> sizes = sweep_sizes(most);
  if (sizes.empty()) return;
  const std::vector<int> tokens(static_cast<std::size_t>(sizes.back()), 0);
  // Seconds one pass of `rows` fresh rows took, or nothing if it failed.
  auto pass = [&](int rows) -> std::optional<double> {
    SequenceKv kv(P);
    if (!kv.reserve(*pool_, rows)) return std::nullopt;
    const Model::Chunk chunk{&kv, std::span(tokens).first(static_cast<std::size_t>(rows)), false};
    const auto start = Clock::now();
    const bool ok = forward_.run(std::span(&chunk, 1), *pool_, {}).has_value();
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    kv.release(*pool_);
    if (!ok) return std::nullopt;
    return took;
  };
  // The first pass faults pages in and warms caches: not a measurement.
  if (!pass(sizes.front())) return;
  CostModel sweep;  // the medians of each size's passes
  int past_knee = 0;
  for (int rows : sizes) {
    double spent = 0;
    for (int i = 0; i < kPassesPerSize && (i == 0 || spent < kSecondsPerSize); ++i) {
      const auto took = pass(rows);
      if (!took) break;
      spent += *took;
      sweep.add_prefill(*took, rows);
      if (cache_) cache_->cost_model().add_prefill(*took, rows);
    }
    // Two sizes past the knee (a row costs more than kThroughputSlack times
    // the best; one could be a noisy moment): larger passes will not be
    // chosen, and the curve extrapolates them.
    const std::vector<PassCost>& points = sweep.costs().prefill;
    if (points.empty() || points.back().rows != rows) break;
    const auto cheapest =
        std::min_element(points.begin(), points.end(), [](const PassCost& a, const PassCost& b) {
          return a.seconds / a.rows < b.seconds / b.rows;
        });
    const bool past =
        points.back().seconds / rows > kThroughputSlack * cheapest->seconds / cheapest->rows;
    past_knee = past ? past_knee + 1 : 0;
    if (past_knee == 2) break;
  }
  sweep_ = sweep.costs().prefill;
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
  if (sweep_.empty()) measure_pass_sizes();
  (void)cache_->calibrate();
}

}  // namespace kvtier
