// What getting a block's worth of tokens costs, from each tier and by
// recomputing them: the figures behind the load-or-recompute decision
// (KvCache::acquire_prefix), measured so that no single measurement rules.
//
// Recomputing is not a cost per token: a pass's rows share one read of the
// weights, so on a GPU a 1024-row pass costs a tenth per token of a 16-row
// one, and on a 2-core CPU a 16-row pass costs 1.4x per token what a 256-row
// one does. So the prefill figure is a curve: what a pass costs by its rows,
// one point per size class (rows 1, 2-3, 4-7, ..., 2^k..2^(k+1)-1), and
// what a prefill of n tokens costs is the passes it takes at the token budget
// in force (PrefillShape), read off the curve.
//
// One figure taken once at start-up used to decide every load against every
// recompute for the daemon's life, and on a busy machine one measurement of
// the prefill cost ranged from 15.9 to 50,597 us a token between two starts.
// So every figure here is the median of its most recent kWindow samples:
// start-up calibration adds several (Scheduler::calibrate's sweep of pass
// sizes, KvCache::calibrate for the tiers), and the engine keeps adding the
// real passes it runs (Scheduler::step), so a wild sample is outvoted at
// once and the curve follows the machine as its load changes. The tiers'
// figures come from calibration alone: a real transfer's time mixes queueing
// with the per-block cost the decision needs.
//
// The decision (plan()) compares what the request would wait for: loading
// the run (latency + per block, then its own prefill), recomputing it with
// its prefill (in the passes the budget allows), or both at once, the front
// of the run recomputed while the rest loads, split where the two finish
// together. Invariant: the plan chosen is never expected to wait longer than
// recomputing, so a cached prefix never makes a request slower than cold by
// the model's figures; and with no prefill figure yet it loads (as a cache
// should), never dividing by anything.
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <array>
#include <cstddef>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "engine/cache/tier.h"

namespace kvtier {

// The load-or-recompute figures: loading a run of n blocks from a tier costs
// latency + n * per_block. Zeros mean "loading is free" (no measurement yet).
struct LoadCost {
  double latency_s = 0;
  double per_block_s = 0;
  int samples = 0;  // how many measurements the figures are the medians of
};

// One point of the prefill curve: a pass of `rows` rows takes `seconds`.
struct PassCost {
  int rows = 0;        // the median rows of the class's passes
  double seconds = 0;  // rows x the median cost per row of the class's passes
  int samples = 0;     // how many passes the medians are of
};

// How a request's prefill runs at the moment: the passes its tokens take.
struct PrefillShape {
  int chunk = 1;   // prompt tokens a pass takes (the token budget in force), >= 1
  int beside = 0;  // rows of other requests' decodes in each of those passes
};

struct TierCosts {
  // The prefill curve: a point per size class that has samples, ascending
  // in rows. Empty: no figure yet.
  std::vector<PassCost> prefill;
  // Bringing a block up from each tier below L1 (L1's stays zero): from L2
  // a copy or a decode (no fixed latency), from a store its reads.
  PerTier<LoadCost> load;

  // What a pass of `rows` rows takes, from the curve: on the line through
  // the two points around it; beyond the last point at that point's cost per
  // row; below the first at the first point's cost (a pass streams all the
  // weights however few its rows). 0 without a point.
  double pass_seconds(int rows) const;
  // What prefilling `tokens` tokens takes in passes of shape.chunk of them
  // (the last one shorter), each beside shape.beside decode rows.
  double prefill_seconds(int tokens, const PrefillShape& shape) const;
  int prefill_samples() const;
};

// A cached run a request could load: the blocks of its prefix from the first
// that only a store has (the ones before it are in L1 or L2).
struct CachedRun {
  Tier tier = kFirstStoreTier;  // where its first block is read from: it stands for the run
  int blocks = 0;               // in the run
  int reads = 0;                // of those, the ones still to read (others are on their way)
  // Leading blocks that may be recomputed while the rest loads (they are
  // all still to read): 0 when the run must be loaded or recomputed whole.
  int splittable = 0;
  int suffix_tokens = 1;  // prefilled after the run whatever is chosen (at least the last token)
};

// What plan() chose, and the waits it weighed (seconds, by the figures).
struct RunPlan {
  int recompute = 0;       // leading blocks to recompute: 0 loads the run, blocks skips it
  double wait_s = 0;       // the request's wait with this plan
  double load_s = 0;       // with the whole run loaded
  double recompute_s = 0;  // with the whole run recomputed
};

// The curve as people read it: "16 rows 1968 us/row (3), 32 rows ..."
// (the cost per row and the samples of each point); "none" when empty.
std::string prefill_curve_text(std::span<const PassCost> curve);

class CostModel {
 public:
  // Samples kept per figure: enough that a burst of bad ones is outvoted,
  // few enough that a figure follows a change of load within a few dozen
  // passes. Odd, so the median is one of the samples.
  static constexpr std::size_t kWindow = 31;

  // A forward pass of `rows` rows that took `seconds`. Ignored unless both
  // are positive and finite.
  void add_prefill(double seconds, int rows);
  // One measurement of loads from `tier`: the fixed latency and the cost
  // per block (from L2, one block brought up: latency 0).
  void add_load(Tier tier, double latency_s, double per_block_s);

  // Every figure fixed at `costs` from now on, later samples ignored: for
  // benches and tests that stage a decision (all zeros: always load). Curve
  // points without a positive size and time are dropped, the rest sorted,
  // one per size.
  void pin(const TierCosts& costs);

  // The medians now, kept up to date by every add (cheap to ask: the
  // load-or-recompute decision asks at every admission).
  const TierCosts& costs() const { return costs_; }

  // The cheapest way, by the figures, to have `run` (blocks of page_size
  // tokens) in L1 for a prefill of the given shape: load it all, recompute
  // it all, or recompute its first blocks while the rest loads (the split
  // where both finish together). Ties go to loading. Loads while prefill
  // has no figure.
  RunPlan plan(const CachedRun& run, int page_size, const PrefillShape& shape) const;

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
  // Size classes of passes: rows in [2^c, 2^(c+1)).
  static constexpr int kClasses = 31;
  void rebuild_prefill();

  std::array<Window, kClasses> pass_rows_, pass_per_row_;
  PerTier<Window> load_latency_, load_per_block_;
  TierCosts costs_;  // the windows' medians and sizes, or the pinned figures
  bool pinned_ = false;
};

}  // namespace kvtier
