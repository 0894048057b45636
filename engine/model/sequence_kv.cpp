#include "engine/model/sequence_kv.h"

#include <cassert>
#include <cstring>

namespace kvtier {

bool SequenceKv::last_block_needs_copy(const tiers::BlockPool& pool) const {
  // A full last block (length_ on a page boundary) is never written again:
  // the next position starts a new page.
  if (length_ % page_size_ == 0) return false;
  const int last = length_ / page_size_;
  assert(last < static_cast<int>(block_ids_.size()));
  return pool.is_shared(block_ids_[last]);
}

int SequenceKv::blocks_needed(const tiers::BlockPool& pool, int n) const {
  const int pages = (n + page_size_ - 1) / page_size_ - static_cast<int>(block_ids_.size());
  const int copy = n > length_ && last_block_needs_copy(pool) ? 1 : 0;
  return (pages > 0 ? pages : 0) + copy;
}

bool SequenceKv::reserve(tiers::BlockPool& pool, int n) {
  const int needed = blocks_needed(pool, n);
  if (needed == 0) return true;
  if (pool.num_free() < needed) return false;
  if (n > length_ && last_block_needs_copy(pool)) {
    int& slot = block_ids_[length_ / page_size_];
    const int copy = *pool.allocate();
    // The whole block, not just the filled positions: cheaper to reason
    // about, and the unfilled tail is never read before it is written.
    pool.copy(pool.data(copy), pool.data(slot), pool.block_bytes());
    pool.release(slot);  // still held by the other sharers, so never freed here
    slot = copy;
  }
  const int pages = (n + page_size_ - 1) / page_size_ - static_cast<int>(block_ids_.size());
  for (int i = 0; i < pages; ++i) block_ids_.push_back(*pool.allocate());
  return true;
}

SequenceKv SequenceKv::fork(tiers::BlockPool& pool) const {
  SequenceKv child(page_size_);
  child.length_ = length_;
  child.block_ids_ = block_ids_;
  for (int id : block_ids_)
    if (id != kEvictedBlock) pool.add_ref(id);
  return child;
}

void SequenceKv::advance(int n) {
  assert(n >= 0 && length_ + n <= capacity());
  length_ += n;
}

void SequenceKv::release(tiers::BlockPool& pool) {
  for (int id : block_ids_)
    if (id != kEvictedBlock) pool.release(id);
  block_ids_.clear();
  length_ = 0;
}

SequenceKv SequenceKv::adopt(int page_size, std::vector<int> block_ids, int length) {
  SequenceKv kv(page_size);
  kv.block_ids_ = std::move(block_ids);
  assert(length >= 0 && length <= kv.capacity());
  kv.length_ = length;
  return kv;
}

void SequenceKv::evict_block(tiers::BlockPool& pool, int index) {
  assert(index >= 0 && index < static_cast<int>(block_ids_.size()));
  assert(block_ids_[index] != kEvictedBlock);
  // A partial page is still being written; only full pages can go.
  assert((index + 1) * page_size_ <= length_);
  pool.release(block_ids_[index]);
  block_ids_[index] = kEvictedBlock;
}

int SequenceKv::resident_blocks() const {
  int n = 0;
  for (int id : block_ids_) n += id != kEvictedBlock ? 1 : 0;
  return n;
}

}  // namespace kvtier
