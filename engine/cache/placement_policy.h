// What goes where in the prefix cache: the policy written down, and the
// victim choice behind it. KvCache (kv_cache.h) performs the moves; this
// class answers which block moves next.
//
// What a change here alone can do, and what it cannot: which blocks may
// move or be dropped (the filters below: pins, holds, clean or not,
// protection, which L2 blocks a store has yet to be written) is this
// class's. Four decisions are made where the moves are, in KvCache, each
// asking this class for its candidates:
//  * the L2 victim cascade's order, and waiting for a store write in flight
//    rather than dropping a block (KvCache::alloc_l2, kv_cache.cpp);
//  * write_through: a block is written to each store as it enters the
//    cache (KvCache::insert, kv_cache.cpp);
//  * write_back: blocks in L2 not yet in a store are written down, up to
//    256 writes in flight (KvCache::start_writeback, kv_cache_stores.cpp);
//  * what a flush writes down before it lets go (KvCache::flush,
//    kv_cache.cpp; KvCache::persist, kv_cache_stores.cpp).
// The order among candidates is the tree's: each tier's LRU index
// (radix_cache.h) is what every query walks, so another order (LFU, a reuse
// count) is a second index in RadixCache kept by RadixCache::set and
// touch(), and a query here that walks it.
//
// Policy:
//  * Demotion instead of dropping: when L1 must free blocks
//    (KvCache::make_free_l1), the least recently used cached blocks that no
//    request holds go to L2 (a copy; L1 and L2 are both host memory without
//    a GPU); when L2 must free a slot, a block a store tier (L3, ...) already
//    has (clean) is released first, then a block no swapped request waits
//    for, then any; each store drops its own least recently used entries.
//  * Store writes (L3, ...; engine/cache/store_tiers.h), each store tier by its
//    own write policy: with write_back a block is written from L2 as soon as
//    it is demoted there, so L2 slots are mostly clean when L2 needs them (a
//    slot whose write is still in flight is waited for rather than dropped);
//    with write_through every block is written from L1 as it enters the
//    cache.
//  * Promotion: an admission's prefix comes up from L2 (a copy on the copy
//    worker, or a device's copy queue) and from the fastest store that has
//    it (a read) into fresh L1 blocks; the request waits (the engine does
//    not) until they complete, and then shares the blocks. A tail of blocks
//    only stores have is loaded only when reading it is cheaper than
//    prefilling it (engine/cache/cost_model.h), and not at all from a store whose
//    breaker is open.
//  * Cleaning: when L1 runs low on free blocks, the next few demotion
//    candidates are copied to L2 in the background, so that demoting them
//    later is a release, not a copy on the engine thread. Cleaning uses only
//    free L2 slots or ones whose block a store also has, so it never costs a
//    block. (A swapped request's partial block is still copied at once.)
//  * Pins keep a block in L1 or L2; holds (swapped-out requests) make a block
//    the last choice for dropping, and protect its store entries. The blocks an admission is taking
//    are never demoted to make room for each other (protect()).
//  * Formats: an int8 tier stores blocks quantised (engine/cache/cache_config.h,
//    engine/cache/transfer_plan.h): encoded on the way down into it, decoded on
//    the way up into L1; between two int8 tiers the encoded bytes move as
//    they are.
//
// Order: every query takes the least recently used candidate first (the
// tree's per-tier LRU indexes, radix_cache.h: leaves before their parents),
// among the blocks not in use in that tier: the tree keeps those that are
// (held by a request or a transfer, loading, moving) in an index of their
// own, so a query never walks past them. The tree must track L1's sharing
// (RadixCache::track_l1).
//
// Reference counting in L1: the cache holds one pool reference per node in
// L1 and one per read of the block in flight (a store write or a cleaning
// copy from it); requests hold theirs. So a node is demotable exactly when the
// pool's count is 1.
//
// Not thread-safe: the engine thread asks; the tree and pools must outlive
// the policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/cache/radix_cache.h"
#include "tiers/block_pool.h"

namespace kvtier {

class PlacementPolicy {
 public:
  // `l2` is null without an L2. The tree tracks L1's sharing
  // (RadixCache::track_l1): what is in use there is the tree's to say.
  PlacementPolicy(const RadixCache& tree, const tiers::BlockPool* l2) : tree_(&tree), l2_(l2) {}

  // The nodes matched by the admission in progress (stamped `stamp` by the
  // tree) are not demoted to make room for each other until unprotect().
  void protect(std::uint64_t stamp) { protected_stamp_ = stamp; }
  void unprotect() { protected_stamp_.reset(); }

  // L1: the next block to demote to free a block, or null.
  CacheNode* l1_victim() const;
  // Up to n of the next demotion candidates, in the order l1_victim() would
  // take them (pins and protection aside): what cleaning copies ahead.
  std::vector<CacheNode*> l1_next_victims(std::size_t n) const;
  // L1 blocks the cache could free right now (cached, held by no request).
  int demotable_l1() const;

  // Which L2 blocks may be pushed out when no slot is free.
  enum class L2Victims {
    kInStore,   // only blocks a store also has and L1 does not (cleaning must not cost a block)
    kWithCopy,  // blocks another tier (L1 or a store) also has
    kAny,       // any unpinned block, the least costly first
  };
  // What a block demoted from L1 into L2 may push out: a block a store
  // already has may take a free or clean slot, never push out a block that
  // exists only in L2.
  static L2Victims l2_victims_for_demotion(const CacheNode& n) {
    return n.in_store() ? L2Victims::kWithCopy : L2Victims::kAny;
  }
  // L2: the first choice for `victims`, or null (for kAny, L2 may still have
  // blocks on their way to a store: wait for one, then try
  // l2_clean_victim()).
  CacheNode* l2_victim(L2Victims victims) const;
  // A block a store also has, once a write landed.
  CacheNode* l2_clean_victim() const;
  // The last resort: a block no swapped request waits for, then any.
  CacheNode* l2_last_resort() const;
  // write_back's next block to write to `store`: in L2, not yet in it.
  CacheNode* l2_unwritten(Tier store) const;

  // flush(tier)'s next block to let go: unheld by requests and unpinned
  // (L1, L2), unheld by swapped requests and not loading (a store tier).
  CacheNode* flushable(Tier tier) const;
  // Up to n of flush(kL1)'s next blocks, in the order flushable() takes them.
  std::vector<CacheNode*> l1_flushable(std::size_t n) const;

 private:
  bool flushable_l1(const CacheNode& n) const { return unused_l1(n) && n.pins == 0; }
  // A cached L1 block only the cache references: no request, read or load.
  bool unused_l1(const CacheNode& n) const { return !tree_->in_use(n, Tier::kL1); }
  bool can_demote(const CacheNode& n) const;
  // An L2 block that may leave its slot: unpinned, nothing moving it.
  bool movable_l2(const CacheNode& n) const { return n.pins == 0 && !tree_->in_use(n, Tier::kL2); }

  const RadixCache* tree_;
  const tiers::BlockPool* l2_;
  std::optional<std::uint64_t> protected_stamp_;
};

}  // namespace kvtier
