// A fixed number of equal-size blocks carved from one aligned allocation.
//
// This is the L1 pool's host stand-in: the engine computes attention straight
// out of these blocks. Blocks are opaque bytes here; what they hold is the
// engine's business.
//
// Invariant: every id in [0, num_blocks()) is either free (on the free list)
// or allocated, never both. Not thread-safe: one owner thread (the engine).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace kvtier::tiers {

class BlockPool {
 public:
  // Reserves num_blocks * block_bytes bytes aligned to 64 bytes (a cache
  // line). Contents start unspecified and pages are touched only when used,
  // so an idle pool costs address space, not resident memory. REQUIRES: block_bytes is a multiple
  // of 64 and > 0, num_blocks > 0. Throws std::bad_alloc when memory is short.
  BlockPool(std::size_t block_bytes, int num_blocks);

  // A free block, or nullopt when none is left. Most recently freed first,
  // which keeps hot memory hot.
  std::optional<int> allocate();

  // REQUIRES: id is allocated.
  void release(int id);

  std::byte* data(int id) { return base_.get() + static_cast<std::size_t>(id) * block_bytes_; }
  const std::byte* data(int id) const {
    return base_.get() + static_cast<std::size_t>(id) * block_bytes_;
  }

  std::size_t block_bytes() const { return block_bytes_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  bool is_allocated(int id) const { return allocated_[id]; }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  std::size_t block_bytes_;
  int num_blocks_;
  std::unique_ptr<std::byte[], AlignedFree> base_;
  std::vector<int> free_;
  std::vector<bool> allocated_;
};

}  // namespace kvtier::tiers
