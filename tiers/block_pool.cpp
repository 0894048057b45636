#include "tiers/block_pool.h"

#include <sys/mman.h>

#include <cassert>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tiers/align.h"

namespace kvtier::tiers {
namespace {

// A region without a deleter stays the caller's. (The unique_ptr would call
// an empty std::function, which throws.)
std::function<void(std::byte*)> or_keep(std::function<void(std::byte*)> deleter) {
  if (deleter) return deleter;
  return [](std::byte*) {};
}

}  // namespace

BlockPool::BlockPool(std::size_t block_bytes, int num_blocks, Memory memory)
    : block_bytes_(block_bytes),
      num_blocks_(num_blocks),
      memory_(memory),
      base_(nullptr, [](std::byte* p) { std::free(p); }),
      ref_counts_(num_blocks, 0) {
  const std::size_t alignment = memory == Memory::kPageable ? 64 : 4096;
  assert(block_bytes > 0 && block_bytes % alignment == 0 && num_blocks > 0);
  const std::size_t total = block_bytes * static_cast<std::size_t>(num_blocks);
  const bool huge = total >= kHugePageBytes;
  // aligned_alloc wants a size that is a multiple of the alignment (total
  // already is one of `alignment`).
  const std::size_t reserved = huge ? round_up(total, kHugePageBytes) : total;
  void* p = std::aligned_alloc(huge ? kHugePageBytes : alignment, reserved);
  if (p == nullptr) throw std::bad_alloc();
  base_.reset(static_cast<std::byte*>(p));
  // Advice only: without transparent huge pages in the kernel, or with none
  // free when a page is first touched, the pool gets small pages.
  if (huge) (void)madvise(p, reserved, MADV_HUGEPAGE);
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

BlockPool::BlockPool(std::size_t block_bytes, int num_blocks, Region region)
    : block_bytes_(block_bytes),
      num_blocks_(num_blocks),
      memory_(Memory::kExternal),
      base_(region.base, or_keep(std::move(region.free))),
      region_copy_(std::move(region.copy)),
      link_(std::move(region.link)),
      ref_counts_(num_blocks, 0) {
  assert(region.base != nullptr && block_bytes > 0 && num_blocks > 0 &&
         block_bytes * static_cast<std::size_t>(num_blocks) <= region.bytes);
  free_.reserve(num_blocks);
  for (int id = num_blocks - 1; id >= 0; --id) free_.push_back(id);  // low ids first, as above
}

BlockPool::~BlockPool() {
  if (locked_) munlock(base_.get(), capacity_bytes());
}

void BlockPool::copy(std::byte* dst, const std::byte* src, std::size_t bytes) const {
  if (region_copy_)
    region_copy_(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
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
  if (++ref_counts_[id] == 2 && share_observer_) share_observer_(id);
}

void BlockPool::release(int id) {
  assert(id >= 0 && id < num_blocks_ && ref_counts_[id] > 0);
  const int left = --ref_counts_[id];
  if (left == 0) free_.push_back(id);
  if (left == 1 && share_observer_) share_observer_(id);
}

}  // namespace kvtier::tiers
