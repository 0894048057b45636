// One sequence's KV cache: its block table and how many positions it holds.
//
// Blocks come from a tiers::BlockPool and are allocated lazily, a page at a
// time, as the sequence grows. Invariant: length() <= capacity() =
// blocks * page_size. The owner must call release() before destroying it
// (the pool outlives every sequence).
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

  // Makes room for positions [0, n). Returns false, allocating nothing, when
  // the pool has too few free blocks.
  bool reserve(tiers::BlockPool& pool, int n);

  // Marks n more positions as filled. REQUIRES: length() + n <= capacity().
  void advance(int n);

  // Returns every block to the pool and empties the sequence.
  void release(tiers::BlockPool& pool);

 private:
  int page_size_;
  int length_ = 0;
  std::vector<int> block_ids_;
};

}  // namespace kvtier
