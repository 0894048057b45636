#include "tiers/block_pool.h"

#include <sys/mman.h>

#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kvtier::tiers {

void BlockPool::AlignedFree::operator()(std::byte* p) const { std::free(p); }

BlockPool::BlockPool(std::size_t block_bytes, int num_blocks, Memory memory)
    : block_bytes_(block_bytes),
      num_blocks_(num_blocks),
      memory_(memory),
      ref_counts_(num_blocks, 0) {
  const std::size_t alignment = memory == Memory::kPageable ? 64 : 4096;
  assert(block_bytes > 0 && block_bytes % alignment == 0 && num_blocks > 0);
  const std::size_t total = block_bytes * static_cast<std::size_t>(num_blocks);
  void* p = std::aligned_alloc(alignment, total);
  if (p == nullptr) throw std::bad_alloc();
  base_.reset(static_cast<std::byte*>(p));
  if (memory == Memory::kPinned) {
    if (mlock(p, total) == 0) {
      locked_ = true;
    } else {
      lock_error_ = std::string("mlock of ") + std::to_string(total) +
                    " bytes failed: " + std::strerror(errno) +
                    " (raise RLIMIT_MEMLOCK, e.g. LimitMEMLOCK= in the unit)";
    }
  }
  free_.reserve(num_blocks);
  // Hand out low ids first: the free list pops from the back.
  for (int id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

BlockPool::~BlockPool() {
  if (locked_) munlock(base_.get(), capacity_bytes());
}

std::optional<int> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int id = free_.back();
  free_.pop_back();
  ref_counts_[id] = 1;
  return id;
}

void BlockPool::add_ref(int id) {
  assert(id >= 0 && id < num_blocks_ && ref_counts_[id] > 0);
  ++ref_counts_[id];
}

void BlockPool::release(int id) {
  assert(id >= 0 && id < num_blocks_ && ref_counts_[id] > 0);
  if (--ref_counts_[id] == 0) free_.push_back(id);
}

}  // namespace kvtier::tiers
