// What the prefix cache hands the scheduler: move-only handles that own what
// they stand for and give it back through the cache when they go, so the
// scheduler never touches the pool or the cache's books for them.
//
//   PrefixLease  admission's cached prefix: a pool reference on each block
//                (until KvCache::resume hands them to the request's
//                SequenceKv) and, for blocks still landing a layer at a time,
//                the pending LayerLoad;
//   SwapTicket   what a swapped-out request keeps in the cache: holds on its
//                full blocks and its own blocks stashed in L2.
//
// A handle must not outlive its cache. Not thread-safe: the engine thread's.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/cache/cache_stats.h"
#include "engine/cache/tier.h"
#include "tiers/block_key.h"

namespace kvtier {

class KvCache;

// Moves still landing in L1 blocks a request already holds: the reads from
// L2 and the stores of the blocks of its prefix whose bytes are on the way.
// When every read comes a layer at a time (by_layer()), the request may
// compute on layer l of them once KvCache::await_layer(l) returns; a load
// with reads of whole blocks (only a split takes one, see PrefixSplit) is
// waited for whole, KvCache::arrived(). A stored block is verified only when the whole of it is
// in, so nothing computed from the load may be used before KvCache::settle()
// says it was right. Checksums stay per block: what a corrupt block touched
// is thrown away, never sent.
class LayerLoad {
 public:
  bool empty() const { return reads_.empty(); }
  // Every read lands a layer at a time (else the load is waited for whole).
  bool by_layer() const {
    for (const Read& r : reads_)
      if (!r.by_layer) return false;
    return true;
  }
  // The L1 block of the first block on its way up: what precedes it in the
  // request's table was in L1 already. REQUIRES: !empty().
  int first_block() const { return blocks_.front(); }
  // How many reads come from each tier.
  PerTier<int> reads_from() const {
    PerTier<int> n;
    for (const Read& r : reads_) ++n[r.tier];
    return n;
  }

 private:
  friend class KvCache;
  std::vector<tiers::BlockKey> keys_;  // every block on its way up
  std::vector<int> blocks_;            // and their L1 ids
  struct Read {
    Tier tier;  // L2 or the store tier it comes from
    std::uint64_t ticket;
    bool by_layer;  // lands a layer at a time (else whole)
  };
  std::vector<Read> reads_;  // a read each
  // What acquire_prefix counted for the run (its lookup, hits, misses,
  // skipped loads and recompute_tokens_avoided); a failed settle() takes it
  // back (the request looks again, and counts what it then finds).
  struct Counted {
    PerTier<long> hits;
    long missed = 0, skipped = 0, tokens = 0;
  } counted_;
};

// A prefix split between recomputing and loading: when loading a cached run
// costs about what recomputing it does, the request recomputes the run's
// first blocks (they need only what precedes them) while the rest loads, and
// prefills the tail once both are done (CostModel::plan chooses where).
// The recomputed blocks are fresh L1 blocks in the lease, at
// [first, first + count) of blocks(): the request holds positions
// [0, first * page_size) at once, computes the gap's, then takes the rest.
struct PrefixSplit {
  int first = 0;  // the first recomputed block's index in blocks()
  int count = 0;  // recomputed blocks; 0: no split
  bool covers(int index) const { return index >= first && index < first + count; }
};

class PrefixLease {
 public:
  PrefixLease() = default;
  PrefixLease(PrefixLease&& other) noexcept { *this = std::move(other); }
  PrefixLease& operator=(PrefixLease&& other) noexcept;
  // Gives back the references of blocks not taken. A load not settled is
  // forgotten: its moves land in the cache all the same.
  ~PrefixLease();

  // The prefix's L1 blocks, in order (possibly none), until taken.
  std::span<const int> blocks() const { return blocks_; }
  // How many of the blocks came from each tier (what the cache counts as
  // each tier's hits).
  const PrefixLookup& served() const { return served_; }
  // Blocks still landing by layer; empty when every block is in L1.
  const LayerLoad& load() const { return load_; }
  bool loading() const { return !load_.empty(); }
  // The blocks the request recomputes before it may use the later ones.
  const PrefixSplit& split() const { return split_; }

 private:
  friend class KvCache;
  KvCache* cache_ = nullptr;
  std::vector<int> blocks_;
  LayerLoad load_;
  PrefixLookup served_;
  PrefixSplit split_;
};

class SwapTicket {
 public:
  SwapTicket() = default;
  SwapTicket(SwapTicket&& other) noexcept { *this = std::move(other); }
  SwapTicket& operator=(SwapTicket&& other) noexcept;
  // Lets go of the holds and of the stashed blocks not swapped in.
  ~SwapTicket();

  // The request's KV length and block-table size when it was swapped out.
  int length() const { return length_; }
  int table_size() const { return table_size_; }
  // Blocks still stashed in L2 (the partial last block, or every resident
  // block of a private table).
  int stashed() const { return static_cast<int>(stash_.size()); }
  // Made by KvCache::swap_out_private: the stash is the whole table, holes
  // and all, not a partial block after shared ones.
  bool private_table() const { return private_; }

 private:
  friend class KvCache;
  void reset();
  KvCache* cache_ = nullptr;
  std::vector<tiers::BlockKey> held_;       // full blocks held in the cache
  std::vector<std::pair<int, int>> stash_;  // (block-table index, L2 slot)
  int length_ = 0;
  int table_size_ = 0;
  bool private_ = false;
};

}  // namespace kvtier
