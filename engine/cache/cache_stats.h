// What the prefix cache reports about itself: per-tier figures, the shape of
// its tree, and where a prefix is cached. Plain values, made by KvCache
// (kv_cache_stats.cpp) and read by the scheduler, the protocol and benches.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/cache/cache_config.h"
#include "engine/cache/cost_model.h"
#include "engine/cache/tier.h"
#include "tiers/block_store.h"
#include "util/latency_stats.h"

namespace kvtier {

struct TierStats {
  std::size_t capacity_blocks = 0;
  std::size_t used_blocks = 0;
  long hits = 0;       // blocks handed to requests from here (L1: shared at once; L2, L3: promoted)
  long demotions = 0;  // blocks moved into this tier from above
  long promotions = 0;  // blocks moved up out of this tier
  long bytes_in = 0;
  long bytes_out = 0;
  // Bytes promotions out of this tier left where they were: layers of a
  // block that no query of the request would read (sliding windows).
  long bytes_skipped = 0;
  long dropped = 0;  // blocks that left the cache from this tier
  long checksum_failures = 0;
  long io_errors = 0;
  bool available = true;
  util::LatencySummary transfer;         // demotions and promotions into or out of this tier
  KvFormat format = KvFormat::kExact;    // how this tier stores a block (L1: always exact)
  std::size_t block_bytes = 0;           // bytes a stored block takes here (before slot rounding)
  std::size_t slot_bytes = 0;            // bytes a block costs here: its slot (L2 and L3 round
                                         // block_bytes up to 4 KiB); 0 for a tier not open
  std::vector<tiers::NodeHealth> nodes;  // a tier on several servers (remote): each one's breaker
};

struct CacheStats {
  PerTier<TierStats> tier;
  // Once per admission that took its prefix (a request waiting for blocks
  // to come up looks again each step, and is counted when it has them).
  long lookups = 0;
  long missed_blocks = 0;  // full prompt blocks no tier had
  long recompute_tokens_avoided = 0;
  long skipped_loads = 0;  // blocks recomputed because that was cheaper than loading
  long cleaned = 0;        // L1 blocks copied to L2 in the background, before their demotion
  std::size_t nodes = 0;
  TierCosts costs;
};

// The shape of the radix tree, for cache.tree.
struct TreeSummary {
  struct Family {           // the blocks under one first block
    std::string first_key;  // hex
    std::vector<int> first_tokens;
    TierCounts blocks;
    int nodes = 0;
    int depth = 0;  // longest prefix in it, in blocks
  };
  std::size_t nodes = 0;
  PerTier<std::size_t> blocks;  // nodes with a copy in each tier
  std::size_t leaves = 0;
  int max_depth = 0;
  std::size_t pinned = 0, held = 0, in_flight = 0;
  std::vector<Family> largest;  // up to `top` families, most nodes first
};

// Where the cached prefix of a token sequence is.
struct PrefixLookup {
  TierCounts blocks;  // by best tier, in prefix order
  int total_blocks() const { return blocks.total(); }
};

}  // namespace kvtier
