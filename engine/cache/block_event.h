// The prefix cache's contents as a stream: a block became stored in a tier,
// or stopped being stored there (KvCache::watch). Replaying every event in
// order from a snapshot (KvCache::stored_blocks) gives what the cache holds,
// which is what a router in front of a fleet routes on.
//
// A block's key is the chained hash of its tokens and of everything before
// them under its namespace's root (KvCache::root): the same prompt under the
// same model, page size and salt gives the same keys on every daemon, so a
// router computes them from the prompt alone.
#pragma once

#include "engine/cache/tier.h"
#include "tiers/block_key.h"

namespace kvtier {

struct BlockEvent {
  tiers::BlockKey key;
  Tier tier = Tier::kL1;
  bool stored = false;  // true: now stored in `tier`; false: no longer there
};

}  // namespace kvtier
