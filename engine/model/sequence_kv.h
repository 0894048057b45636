// One sequence's KV cache: its block table and how many positions it holds.
//
// Blocks come from a tiers::BlockPool and are allocated lazily, a page at a
// time, as the sequence grows. A sequence may share blocks with others: fork()
// makes a new sequence holding the same blocks (one more reference each) at
// the same length, so a prompt prefilled once can fan out into several
// samples.
//
// Evicted pages: an eviction policy (engine/model/eviction_policy.h) may drop a
// whole, full page from the table with evict_block(). Its entry stays, as
// kEvictedBlock, so entry i still covers positions [i * page_size, (i + 1) *
// page_size): keys and values keep the absolute positions they were computed
// at and attention skips the hole. Positions keep counting (length() is the
// next position, not the number held); resident_blocks() is what the
// sequence holds.
//
// Invariants:
//  * length() <= capacity() = blocks * page_size (evicted entries included);
//  * the sequence holds one pool reference per resident (non-evicted) entry
//    of its block table;
//  * only full pages are evicted, so the page that position length() falls
//    into, and every later one, is resident;
//  * after reserve(pool, n) returns true, every block that positions
//    [length(), n) fall into is owned by this sequence alone, so writing them
//    changes no other sequence (copy-on-write). Only the last, partial block
//    can need the copy: positions only grow, so full blocks are never written
//    again and stay shared for good.
//
// Writers (Model::forward, which appends K/V for [length(), length() + m)
// through the block table) must reserve(pool, length() + m) first; that call
// is where the copy happens, so the scheduler needs no separate
// prepare-to-write step. The owner must call release() before destroying a
// sequence (the pool outlives every sequence). Not thread-safe.
#pragma once

#include <span>
#include <vector>

#include "tiers/block_pool.h"

namespace kvtier {

class SequenceKv {
 public:
  explicit SequenceKv(int page_size) : page_size_(page_size) {}

  int length() const { return length_; }
  int capacity() const { return static_cast<int>(block_ids_.size()) * page_size_; }
  int page_size() const { return page_size_; }
  std::span<const int> block_ids() const { return block_ids_; }

  // The blocks reserve(pool, n) would take from the pool: the pages missing
  // for positions [0, n), plus one for the copy when the last block is
  // partial, shared and written by [length(), n).
  int blocks_needed(const tiers::BlockPool& pool, int n) const;

  // Makes room for positions [0, n) and makes the blocks positions
  // [length(), n) fall into this sequence's own (copy-on-write of a shared
  // partial last block: a fresh block gets its bytes and this sequence drops
  // its reference to the old one, whose other owners see no change). Returns
  // false, changing nothing, when the pool has fewer than blocks_needed(pool,
  // n) free blocks.
  bool reserve(tiers::BlockPool& pool, int n);

  // A new sequence sharing every block of this one (a reference each) at the
  // same length. Takes nothing from the free list.
  SequenceKv fork(tiers::BlockPool& pool) const;

  // A sequence that takes over blocks whose references the caller already
  // holds (one per entry, such as blocks a prefix cache shares or a swapped-out
  // sequence gets back), holding `length` positions. REQUIRES: length <=
  // block_ids.size() * page_size.
  static SequenceKv adopt(int page_size, std::vector<int> block_ids, int length);

  // The block-table entry of an evicted page.
  static constexpr int kEvictedBlock = -1;

  // Drops page `index` from the sequence: its pool reference is released (the
  // block returns to the pool unless another sequence shares it) and its
  // entry becomes kEvictedBlock. Positions do not move. REQUIRES: the page is
  // resident and full ((index + 1) * page_size <= length()).
  void evict_block(tiers::BlockPool& pool, int index);

  // Entries of the block table that hold a block (not evicted).
  int resident_blocks() const;
  bool is_evicted(int index) const { return block_ids_[index] == kEvictedBlock; }

  // Marks n more positions as filled. REQUIRES: length() + n <= capacity().
  void advance(int n);

  // Drops this sequence's reference to every block (a block no one else holds
  // returns to the pool) and empties the sequence.
  void release(tiers::BlockPool& pool);

 private:
  // True when writing position length_ would touch a block others hold.
  bool last_block_needs_copy(const tiers::BlockPool& pool) const;

  int page_size_;
  int length_ = 0;
  std::vector<int> block_ids_;
};

}  // namespace kvtier
