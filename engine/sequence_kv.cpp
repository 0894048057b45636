#include "engine/sequence_kv.h"

#include <cassert>

namespace kvtier {

bool SequenceKv::reserve(tiers::BlockPool& pool, int n) {
  const int needed = (n + page_size_ - 1) / page_size_ - static_cast<int>(block_ids_.size());
  if (needed <= 0) return true;
  if (pool.num_free() < needed) return false;
  for (int i = 0; i < needed; ++i) block_ids_.push_back(*pool.allocate());
  return true;
}

void SequenceKv::advance(int n) {
  assert(n >= 0 && length_ + n <= capacity());
  length_ += n;
}

void SequenceKv::release(tiers::BlockPool& pool) {
  for (int id : block_ids_) pool.release(id);
  block_ids_.clear();
  length_ = 0;
}

}  // namespace kvtier
