// A fixed number of equal-size, reference-counted blocks carved from one
// aligned allocation.
//
// Two uses: the L1 pool's host stand-in (the engine computes attention
// straight out of these blocks) and the L2 pinned host pool (Memory::kPinned:
// page-aligned, locked memory that io_uring O_DIRECT reads and writes, and
// that a GPU could copy to and from without staging). Blocks are opaque bytes here; what they hold,
// and who holds them, is the caller's business (the pool knows nothing of models, requests or block
// tables).
//
// A pool can also be laid over memory it did not allocate (a Region): the
// CUDA tiers lay L1 over cudaMalloc memory and L2 over cudaHostAlloc memory
// (tiers/cuda/cuda_memory.h), and the reference counting is the same. data(id)
// is then whatever the region's base makes it: for device memory, a device
// pointer that the host must not dereference (only copies and kernels may).
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
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tiers/copy_queue.h"

namespace kvtier::tiers {

enum class Memory {
  kPageable,     // 64-byte aligned, touched lazily
  kPageAligned,  // 4096-byte aligned (O_DIRECT buffers), touched lazily
  kPinned,       // 4096-byte aligned and mlock()ed up front (see BlockPool())
  kExternal,     // a Region the caller gave; its alignment is the caller's business
};

// Memory a BlockPool did not allocate: `base` and `bytes` describe it, and
// `free`, when set, is called once with `base` when the pool is destroyed (an
// empty one leaves the memory to the caller). The pool never reads or writes
// the memory itself, so base may be a device pointer.
//
// `copy`, when set, says the host cannot dereference the memory (device
// memory): it moves bytes between the region and any memory, this region's
// or the host's, in either direction, and has finished when it returns.
// BlockPool::copy() then uses it in place of memcpy.
//
// `link`, when set beside `copy`, is how the tiers under a pool in this
// memory reach it without the host's help (see DeviceLink).
struct DeviceLink;
struct Region {
  using Copy = std::function<void(std::byte* dst, const std::byte* src, std::size_t bytes)>;
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  std::function<void(std::byte*)> free = {};
  Copy copy = {};
  std::shared_ptr<const DeviceLink> link = {};
};

// What device memory offers the tiers under it (tiers/cuda/cuda_memory.h
// fills it for cuda_device_region): host memory that the device copies to
// and from at full bus speed and asynchronously (page-locked by its driver;
// memory the driver does not know goes through its staging buffers, at about
// half the speed, and synchronously), for the L2 pool; and a copy engine of
// the device's own, whose completions also call on_complete. Either may fail
// with the reason; the caller then does without it (Region::copy still
// works). And `failure`, which says why the device can no longer be trusted
// (with CUDA, a sticky error: the context is lost, and every copy off it
// since is garbage; or a Region::copy that failed), or nothing: cheap enough
// to ask before each block is kept elsewhere.
struct DeviceLink {
  std::function<std::expected<Region, std::string>(std::size_t bytes)> host_memory;
  std::function<std::expected<std::unique_ptr<CopyQueue>, std::string>(
      std::function<void()> on_complete)>
      copy_queue;
  std::function<std::string()> failure;
};

// A pool's own allocation of at least this many bytes starts on a multiple of
// it and asks for transparent huge pages (see BlockPool()).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

class BlockPool {
 public:
  // Reserves num_blocks * block_bytes bytes.
  //  * kPageable: aligned to 64 bytes (a cache line). Contents start
  //    unspecified and pages are touched only when used, so an idle pool
  //    costs address space, not resident memory.
  //  * kPageAligned: aligned to 4096 bytes, so every block can be the buffer
  //    of an O_DIRECT transfer (block_bytes a multiple of 4096 too);
  //  * kPinned: the same, and locked with mlock(). Locking can be refused
  //    (RLIMIT_MEMLOCK); the pool then works on unlocked memory, locked()
  //    says false and lock_error() says why, for the caller to warn about.
  // A pool of kHugePageBytes or more is aligned to kHugePageBytes and
  // advised (madvise MADV_HUGEPAGE) to use transparent huge pages, where the
  // kernel has them: a GPT-2 block (1.1 MiB) then spans one or two pages, not
  // 288, which a copy, an O_DIRECT transfer and the TLB all feel. (tier_bench
  // on a VM where small pages untouched for a while turn slow: an L1 -> L2
  // demotion at 2-9 GB/s before, 8-18 GB/s after; an L3 hit's TTFT about
  // 60 ms before, 35 after; L1 and L2 hits unchanged.)
  // REQUIRES: block_bytes > 0 and a multiple of the alignment, num_blocks >
  // 0. Throws std::bad_alloc when memory is short.
  BlockPool(std::size_t block_bytes, int num_blocks, Memory memory = Memory::kPageable);
  // Lays the pool over `region` (memory() is kExternal, locked() false) and
  // takes it over: region.free runs when the pool goes, also if this throws.
  // Block id starts at region.base + id * block_bytes; data() may therefore
  // return device pointers (see the top of the file).
  // REQUIRES: region.base != nullptr, block_bytes > 0, num_blocks > 0 and
  // num_blocks * block_bytes <= region.bytes.
  BlockPool(std::size_t block_bytes, int num_blocks, Region region);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A free block with a reference count of 1, or nullopt when none is left.
  // Most recently freed first, which keeps hot memory hot.
  std::optional<int> allocate();

  // One more owner of a block. REQUIRES: id is referenced.
  void add_ref(int id);

  // Drops one reference; the block is free again when none is left.
  // REQUIRES: id is referenced.
  void release(int id);

  // Called (on the owner thread, inside add_ref or release) whenever a
  // block's count moves between 1 and 2, so it becomes or stops being
  // shared (is_shared): an owner that keeps blocks it alone references
  // apart from shared ones (the prefix cache's LRU indexes) follows this
  // instead of asking every block. One observer; an empty function removes
  // it. The observer must not add or drop references itself.
  void set_share_observer(std::function<void(int id)> observer) {
    share_observer_ = std::move(observer);
  }

  std::byte* data(int id) { return base_.get() + static_cast<std::size_t>(id) * block_bytes_; }
  const std::byte* data(int id) const {
    return base_.get() + static_cast<std::size_t>(id) * block_bytes_;
  }

  // Whether the host may read and write the blocks in place: false for a
  // Region with a copy function (device memory).
  bool host_addressable() const { return !region_copy_; }
  // Whether p points into the pool's memory (any block).
  bool contains(const std::byte* p) const {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    const auto base = reinterpret_cast<std::uintptr_t>(base_.get());
    return at >= base && at - base < capacity_bytes();
  }
  // The region's DeviceLink, or null (host memory, or a region without one).
  const DeviceLink* link() const { return link_.get(); }
  // Copies `bytes` from src to dst, where each is this pool's memory or host
  // memory: memcpy when the host may address the pool, the region's copy
  // otherwise. Done when it returns. REQUIRES: the ranges do not overlap.
  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) const;

  std::size_t block_bytes() const { return block_bytes_; }
  std::size_t capacity_bytes() const {
    return block_bytes_ * static_cast<std::size_t>(num_blocks_);
  }
  Memory memory() const { return memory_; }
  // kPinned only: whether mlock() succeeded, and the error when it did not.
  bool locked() const { return locked_; }
  const std::string& lock_error() const { return lock_error_; }
  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  // 0 for a free block. REQUIRES: 0 <= id < num_blocks().
  int ref_count(int id) const { return ref_counts_[id]; }
  bool is_allocated(int id) const { return ref_counts_[id] > 0; }
  // More than one owner: writing into it would change what the others see.
  bool is_shared(int id) const { return ref_counts_[id] > 1; }

 private:
  // std::free for the pool's own allocation, the region's deleter otherwise.
  using Deleter = std::function<void(std::byte*)>;
  std::size_t block_bytes_;
  int num_blocks_;
  Memory memory_;
  bool locked_ = false;
  std::string lock_error_;
  std::unique_ptr<std::byte[], Deleter> base_;
  Region::Copy region_copy_;
  std::shared_ptr<const DeviceLink> link_;
  std::vector<int> free_;
  std::vector<int> ref_counts_;
  std::function<void(int)> share_observer_;
};

}  // namespace kvtier::tiers
