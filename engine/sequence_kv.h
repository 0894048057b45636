// One sequence's KV cache: its block table and how many positions it holds.
//
// Blocks come from a tiers::BlockPool and are allocated lazily, a page at a
// time, as the sequence grows. A sequence may share blocks with others: fork()
// makes a new sequence holding the same blocks (one more reference each) at
// the same length, so a prompt prefilled once can fan out into several
// samples.
//
// Invariants:
//  * length() <= capacity() = blocks * page_size;
//  * the sequence holds one pool reference per entry of its block table;
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
