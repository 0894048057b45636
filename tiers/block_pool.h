// A fixed number of equal-size, reference-counted blocks carved from one
// aligned allocation.
//
// This is the L1 pool's host stand-in: the engine computes attention straight
// out of these blocks. Blocks are opaque bytes here; what they hold, and who
// holds them, is the caller's business (the pool knows nothing of models,
// requests or block tables).
//
// Reference counts let several owners share one block (a prompt prefilled
// once and fanned out into samples, later a prefix cache): allocate() hands a
// block out with one reference, add_ref() adds one, release() drops one, and
// the block returns to the free list when the last reference goes.
//
// Invariants: every id in [0, num_blocks()) is either free (on the free list,
// ref_count 0) or referenced (ref_count >= 1), never both; so num_free() +
// the number of referenced blocks == num_blocks(). Not thread-safe: one owner
// thread (the engine).
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
  // so an idle pool costs address space, not resident memory. REQUIRES:
  // block_bytes is a multiple of 64 and > 0, num_blocks > 0. Throws
  // std::bad_alloc when memory is short.
  BlockPool(std::size_t block_bytes, int num_blocks);

  // A free block with a reference count of 1, or nullopt when none is left.
  // Most recently freed first, which keeps hot memory hot.
  std::optional<int> allocate();

  // One more owner of a block. REQUIRES: id is referenced.
  void add_ref(int id);

  // Drops one reference; the block is free again when none is left.
  // REQUIRES: id is referenced.
  void release(int id);

  std::byte* data(int id) { return base_.get() + static_cast<std::size_t>(id) * block_bytes_; }
  const std::byte* data(int id) const {
    return base_.get() + static_cast<std::size_t>(id) * block_bytes_;
  }

  std::size_t block_bytes() const { return block_bytes_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  // 0 for a free block. REQUIRES: 0 <= id < num_blocks().
  int ref_count(int id) const { return ref_counts_[id]; }
  bool is_allocated(int id) const { return ref_counts_[id] > 0; }
  // More than one owner: writing into it would change what the others see.
  bool is_shared(int id) const { return ref_counts_[id] > 1; }

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  std::size_t block_bytes_;
  int num_blocks_;
  std::unique_ptr<std::byte[], AlignedFree> base_;
  std::vector<int> free_;
  std::vector<int> ref_counts_;
};

}  // namespace kvtier::tiers
