// What getting a block's worth of tokens costs, from each tier and by
// recomputing them: the figures behind the load-or-recompute decision
// (KvCache::acquire_prefix), measured so that no single measurement rules.
//
// One figure taken once at start-up used to decide every load against every
// recompute for the daemon's life, and on a busy machine one measurement of
// the prefill cost ranged from 15.9 to 50,597 us a token between two starts.
// So every figure here is the median of its most recent kWindow samples:
// start-up calibration adds several (engine/cost_calibration.cpp: prefill
// passes through calibrate_prefill, the tiers through KvCache::calibrate),
// and the engine keeps adding the prefill cost of the real passes it runs
// (Scheduler::step), so a wild sample is outvoted at once and the prefill
// figure follows the machine as its load changes. The tiers' figures come
// from calibration alone: a real transfer's time mixes queueing with the
// per-block cost the decision needs.
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>

#include "engine/tier.h"

namespace kvtier {

// The load-or-recompute figures: loading a run of n blocks from a tier costs
// latency + n * per_block; recomputing it costs n * page_size *
// prefill_per_token. Zeros mean "always load" (no measurement yet).
struct LoadCost {
  double latency_s = 0;
  double per_block_s = 0;
  int samples = 0;  // how many measurements the figures are the medians of
};

struct TierCosts {
  double prefill_per_token_s = 0;
  int prefill_samples = 0;  // 0: none, the figure is 0
  // Bringing a block up from each tier below L1 (L1's stays zero): from L2
  // a copy or a decode (no fixed latency), from a store its reads.
  PerTier<LoadCost> load;
};

class CostModel {
 public:
  // Samples kept per figure: enough that a burst of bad ones is outvoted,
  // few enough that the prefill figure follows a change of load within a
  // few dozen prefills. Odd, so the median is one of the samples.
  static constexpr std::size_t kWindow = 31;

  // A forward pass that took `seconds` for `tokens` rows. Ignored unless
  // both are positive and finite.
  void add_prefill(double seconds, int tokens);
  // One measurement of loads from `tier`: the fixed latency and the cost
  // per block (from L2, one block brought up: latency 0).
  void add_load(Tier tier, double latency_s, double per_block_s);

  // Every figure fixed at `costs` from now on, later samples ignored: for
  // benches and tests that stage a decision (all zeros: always load).
  void pin(const TierCosts& costs);

  // The medians now, kept up to date by every add (cheap to ask: the
  // load-or-recompute decision asks at every admission).
  const TierCosts& costs() const { return costs_; }

  // The load-or-recompute cut: whether loading a run of `blocks` blocks of
  // `page_size` tokens from `tier` is cheaper than prefilling their tokens
  // (a short run may not be: reads have a fixed latency, prefill is per
  // token). True while prefill has no figure.
  bool worth_loading(Tier tier, int blocks, int page_size) const;

 private:
  // The most recent samples of one figure, oldest first.
  class Window {
   public:
    void add(double sample);
    double median() const;  // 0 when empty
    int size() const { return static_cast<int>(samples_.size()); }

   private:
    std::deque<double> samples_;
  };

  Window prefill_per_token_;
  PerTier<Window> load_latency_, load_per_block_;
  TierCosts costs_;  // the windows' medians and sizes, or the pinned figures
  bool pinned_ = false;
};

// Start-up calibration of the prefill figure: runs `pass` (one forward pass
// of `tokens` rows, false if it failed) `passes` times and adds each
// successful one's time. The first pass warms caches and faults pages in;
// the median of the lot shrugs it off, as it does a busy moment.
void calibrate_prefill(CostModel& costs, int tokens, int passes, const std::function<bool()>& pass);

}  // namespace kvtier
