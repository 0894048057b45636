// Reads kvtierd's `stats` result defensively: every field may be absent
// (older daemons have no `cache` object), and the per-tier figures are
// looked for under the names the daemon may use (`cache.l1` or
// `cache.tiers[0]`; `used_blocks` or `blocks_used`, ...). Missing = -1 for
// sizes, 0 for counters.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/cache/tier.h"

namespace kvtier::bench {

// The tiers are the engine's (engine/cache/tier.h): kNumTiers of them,
// fastest first, named as `stats.cache` and `cached_tokens` name them
// (kTierNames' name) and labelled as tables print them (its label).

struct TierFigures {
  bool present = false;
  long used = -1;      // blocks held now
  long capacity = -1;  // blocks it can hold
  long hits = 0;       // blocks requests found here
  long demotions = 0;  // blocks moved into this tier from above
  long promotions = 0;
  long dropped = 0;
};

struct StatsView {
  long waiting = 0, running = 0, pending = 0;
  long blocks_used = -1, blocks_free = -1;
  long preemptions = 0, recomputed_tokens = 0, swapped_out = 0;
  long submitted = 0, completed = 0, cancelled = 0, failed = 0, tokens_generated = 0;
  bool has_cache = false;
  PerTier<TierFigures> tier;
  long missed_blocks = 0;
  long cache_nodes = -1;  // blocks in the radix tree (stats.cache.nodes), -1 if absent

  long hit_blocks() const;
  // Share of looked-up prompt blocks found in tier t; -1 without cache stats.
  double hit_rate(int t) const;
};

StatsView view_stats(const nlohmann::json& stats);

// A fleet's `stats` as one daemon's: the numbers at the same place in each
// added (counters and sizes; a latency summed means nothing, and nothing
// here reads one), anything else the first's. null for none.
nlohmann::json sum_stats(const std::vector<nlohmann::json>& each);

// b - a for the counters (a run's own share of cumulative counters); sizes from b.
StatsView stats_delta(const StatsView& a, const StatsView& b);

}  // namespace kvtier::bench
