// The prefix tree over full KV blocks, and where each block lives now.
//
// Page granularity: a node is one full block (page_size tokens) and its
// children are the blocks that follow it in some cached sequence. Nodes are
// found by their chained key (engine/cache/block_hash.h), which names the whole
// prefix, so matching a prompt of n full blocks is n hash computations and n
// hash-map lookups, inserting is the same, and evicting one node is O(log N)
// in the LRU index: all O(prefix length), as bench/radix_bench shows. A
// radix tree with compressed edges would save nothing here: every edge is
// exactly one block.
//
// Where a node's bytes are: a Location per tier (several at once is normal:
// a block read back from L2 keeps its L2 copy until L2 needs the slot).
//   L1  an L1 pool block; the cache holds one pool reference on it, requests
//       that share it hold theirs;
//   L2  an L2 pool slot, the cache's;
//   L3  an entry under `key` in the L3 store (no slot: the store finds it);
//       so for every store tier (tier.h's kFirstStoreTier and below).
// A node that holds no tier's bytes (a "ghost") is kept only while it has
// children, since match() walks from the root and must pass through it; a
// ghost stops the match.
//
// LRU: each tier keeps its nodes ordered by (last_use, deeper first, key), so
// the least recently used block of a tier is found in O(log N), leaves before
// their parents (touch() stamps a whole matched path with one time). A tier
// keeps two such indexes: the nodes in use there, which no victim query may
// take whatever the policy, and the rest, so that choosing a victim never
// walks past the blocks running requests hold. In use (in_use()):
//   L1      loading, or its block referenced beyond the cache's own
//           reference (requests, transfers reading it): the pool tells the
//           tree when that changes (track_l1, BlockPool's share observer);
//   L2      a move under way into or out of its slot, or a write from it to
//           a store (CacheNode::moving_l2, writing_to_store);
//   stores  loading into L1 (from any tier).
// Every other condition (pins, holds, the admission being protected) stays
// with the placement policy's queries.
//
// This class is only the structure and its indexes; the moves between tiers
// live in KvCache (engine/cache/kv_cache.h), their policy in PlacementPolicy
// (engine/cache/placement_policy.h). Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/cache/tier.h"
#include "tiers/block_key.h"
#include "tiers/block_pool.h"

namespace kvtier {

// Where a node's block stands in one tier.
enum class Presence : std::uint8_t {
  kNone,     // not there
  kWriting,  // coming in from above (a cleaning copy into L2, a write to L3): its
             // place is reserved, and it is not there until the move completes
  kStored,   // there, whole
  kLoading,  // coming in from below (a promotion into L1): its block is
             // reserved and held, its bytes are not usable yet
};

struct Location {
  Presence state = Presence::kNone;
  int slot = -1;  // the pool block (L1) or slot (L2) unless kNone; -1 in a store
};

struct CacheNode {
  tiers::BlockKey key;
  CacheNode* parent = nullptr;  // null for the first block of a chain
  // This block's page_size tokens (at most SchedulerConfig::kMaxPageSize),
  // in an array of their own rather than a vector: 16 bytes a node less.
  std::unique_ptr<int[]> token_data;
  std::uint16_t token_count = 0;
  int depth = 1;  // 1 for a first block
  int children = 0;

  // Set only through RadixCache::set, which keeps the LRU indexes.
  PerTier<Location> at;
  // Where the bytes in L1 came from, until a request is handed them: whose
  // hit that is (kL1 once handed out, and for blocks computed in L1). While
  // L1 is loading, the tier it loads from.
  Tier hit_tier = Tier::kL1;

  // Layers the L1 block lacks (bit l: layer l), read without them because
  // no query of the request that brought it up reads them (sliding windows,
  // KvLayout::layers_reading). Such a copy serves only requests that need
  // none of them, and is never copied anywhere: it is not the block. Zero
  // once L1 lets go of it (RadixCache::set).
  std::uint64_t absent_layers = 0;

  int pins = 0;   // cache.pin: kept in L1 or L2, never only on L3 or nowhere
  int holds = 0;  // swapped-out requests waiting for it: dropped only as a last resort
  std::uint64_t last_use = 0;

  std::span<const int> tokens() const { return {token_data.get(), token_count}; }
  Presence state(Tier t) const { return at[t].state; }
  int slot(Tier t) const { return at[t].slot; }
  bool stored(Tier t) const { return state(t) == Presence::kStored; }
  bool writing(Tier t) const { return state(t) == Presence::kWriting; }
  // Holds a place in the tier, with its bytes or for them: stored or loading
  // (what the tier's LRU index lists).
  bool in(Tier t) const { return stored(t) || state(t) == Presence::kLoading; }
  bool loading() const { return state(Tier::kL1) == Presence::kLoading; }
  bool usable_l1() const { return stored(Tier::kL1); }
  // In L1 with every layer: a copy other tiers may take.
  bool whole_l1() const { return usable_l1() && absent_layers == 0; }
  // An L1<->L2 move is under way: a cleaning copy into its L2 slot, or a
  // promotion out of it. The slot must not be given away meanwhile.
  bool moving_l2() const { return writing(Tier::kL2) || (loading() && hit_tier == Tier::kL2); }
  bool resident() const {
    for (int t = 0; t < kNumTiers; ++t)
      if (in(static_cast<Tier>(t))) return true;
    return false;
  }
  bool writing_any() const {
    for (int t = 0; t < kNumTiers; ++t)
      if (writing(static_cast<Tier>(t))) return true;
    return false;
  }
  // A store tier (L3 and below) has the block: a copy that outlives L1 and
  // L2, so letting go of those costs no recomputation.
  bool in_store() const {
    for (int t = static_cast<int>(kFirstStoreTier); t < kNumTiers; ++t)
      if (stored(static_cast<Tier>(t))) return true;
    return false;
  }
  // A write of the block to a store tier is in flight.
  bool writing_to_store() const {
    for (int t = static_cast<int>(kFirstStoreTier); t < kNumTiers; ++t)
      if (writing(static_cast<Tier>(t))) return true;
    return false;
  }
  // The fastest tier holding usable bytes; the last tier for a node that
  // holds none (a ghost, or one whose only copy is still being written).
  Tier best_tier() const {
    if (usable_l1()) return Tier::kL1;
    for (int t = 1; t < kNumTiers; ++t)
      if (stored(static_cast<Tier>(t))) return static_cast<Tier>(t);
    return static_cast<Tier>(kNumTiers - 1);
  }
};

class RadixCache {
 public:
  explicit RadixCache(int page_size) : page_size_(page_size) {}
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // Follows the sharing of `l1`'s blocks (its share observer, which the tree
  // takes until it goes), so that a cached L1 block a request or a transfer
  // also references counts as in use. Without it only loading does. Call
  // before any node is in L1. REQUIRES: l1 outlives the tree.
  void track_l1(tiers::BlockPool& l1);

  int page_size() const { return page_size_; }

  // The nodes of the longest cached run of full blocks of `tokens` under
  // `root`, in order, at most max_blocks of them. Stops at the first block
  // that has no node or whose node holds no bytes (a ghost).
  std::vector<CacheNode*> match(const tiers::BlockKey& root, std::span<const int> tokens,
                                int max_blocks) const;

  CacheNode* find(const tiers::BlockKey& key) const;

  // The node of the block `tokens` (page_size of them) that follows `parent`
  // (null: the first block under `root`), created without any location when
  // missing.
  CacheNode* insert(const tiers::BlockKey& root, CacheNode* parent, std::span<const int> tokens);

  // Stamps the nodes with the next time (one time for the whole path).
  void touch(std::span<CacheNode* const> path);

  // Moves a node in or out of a tier: the only way to change a Location, so
  // the LRU indexes follow ({} clears). A node left holding nothing, writing
  // nowhere and with no children, pins or holds is erased (and so is each
  // ancestor that becomes such a leaf); the pointer is then dangling, so
  // callers must not use it after a clear.
  void set(CacheNode* node, Tier tier, Location where);

  // Called by set() whenever a node becomes stored in a tier or stops being
  // stored there, before the node may be erased: the tree's contents as a
  // stream (KvCache::watch). Empty: nobody listens.
  using StoredListener = std::function<void(const CacheNode& node, Tier tier, bool stored)>;
  void on_stored_change(StoredListener listener) { stored_listener_ = std::move(listener); }

  // Erases the node if it holds no bytes and has no children, pins, holds or
  // move in flight, and then each ancestor that becomes such a leaf. Call
  // after dropping a pin or a hold. The pointer may dangle afterwards.
  void prune(CacheNode* node) { erase_if_empty(node); }

  // The time the last touch() stamped: nodes carrying it were matched in the
  // current admission and must not be demoted to make room for each other.
  std::uint64_t now() const { return clock_; }

  // Whether `node` is in use in `tier` (see the top): no victim there.
  bool in_use(const CacheNode& node, Tier tier) const;

  // The least recently used node of `tier` not in use there that satisfies
  // pred, or null.
  template <typename Pred>
  CacheNode* lru(Tier tier, Pred pred) const {
    for (const LruKey& k : idle_[static_cast<int>(tier)])
      if (pred(*k.node)) return k.node;
    return nullptr;
  }

  // Up to n such nodes of `tier`, least recently used first.
  template <typename Pred>
  std::vector<CacheNode*> lru_n(Tier tier, std::size_t n, Pred pred) const {
    std::vector<CacheNode*> out;
    for (const LruKey& k : idle_[static_cast<int>(tier)]) {
      if (out.size() == n) break;
      if (pred(*k.node)) out.push_back(k.node);
    }
    return out;
  }

  std::size_t size() const { return nodes_.size(); }
  // Nodes in the tier (stored or loading), and those of them not in use.
  std::size_t count(Tier tier) const {
    return idle_[static_cast<int>(tier)].size() + busy_[static_cast<int>(tier)].size();
  }
  std::size_t count_idle(Tier tier) const { return idle_[static_cast<int>(tier)].size(); }
  // An error message if a node is missing from its index or listed in the
  // wrong one (a change of state the tree was not told of).
  std::expected<void, std::string> check_indexes() const;
  // Every node, in no particular order (summaries, invariant checks).
  std::vector<const CacheNode*> nodes() const;

 private:
  // An index entry: the node's last use when it was listed; among equals
  // the deeper block first, then the key. A node's depth and key never
  // change, so they are read through the node rather than copied here (16
  // bytes an entry less: a node is listed once for each tier it is in).
  struct LruKey {
    std::uint64_t last_use;
    CacheNode* node;
    bool operator<(const LruKey& o) const {
      if (last_use != o.last_use) return last_use < o.last_use;
      if (node->depth != o.node->depth) return node->depth > o.node->depth;
      return node->key < o.node->key;
    }
  };
  static LruKey lru_key(const CacheNode& n) { return {n.last_use, const_cast<CacheNode*>(&n)}; }
  // Lists n in the idle or busy index of each tier it is in; unindex takes
  // it out of both (what decided the index may have changed since).
  void index(CacheNode& n);
  void unindex(CacheNode& n);
  // The pool's share observer: the block's node changes index.
  void l1_sharing_changed(int block);
  // Erases n if it is an empty leaf, then its parent if that became one.
  void erase_if_empty(CacheNode* n);

  int page_size_;
  std::uint64_t clock_ = 0;
  // The nodes themselves, not pointers to them: one allocation a node, and
  // an unordered_map never moves its elements.
  std::unordered_map<tiers::BlockKey, CacheNode, tiers::BlockKeyHash> nodes_;
  std::set<LruKey> idle_[kNumTiers];  // in the tier and not in use there
  std::set<LruKey> busy_[kNumTiers];  // in use there (in_use)
  tiers::BlockPool* l1_ = nullptr;    // track_l1's
  std::vector<CacheNode*> l1_owner_;  // with l1_: the node in L1 on each block
  StoredListener stored_listener_;
};

}  // namespace kvtier
