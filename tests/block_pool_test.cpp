// BlockPool's reference counts: a block is free exactly when its last
// reference is dropped, and free + referenced always adds up to the pool.
#include "tiers/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kvtier::tiers {
namespace {

// Every block is either free or referenced, never both: the pool's own view
// of its invariant, counted from outside.
int referenced(const BlockPool& pool) {
  int n = 0;
  for (int id = 0; id < pool.num_blocks(); ++id) n += pool.is_allocated(id) ? 1 : 0;
  return n;
}

TEST(BlockPoolTest, AllocateGivesOneReferenceAndReleaseFreesAtZero) {
  BlockPool pool(64, 3);
  EXPECT_EQ(pool.num_free(), 3);
  const int a = *pool.allocate();
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_FALSE(pool.is_shared(a));
  EXPECT_EQ(pool.num_free(), 2);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a), 0);
  EXPECT_FALSE(pool.is_allocated(a));
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(referenced(pool) + pool.num_free(), pool.num_blocks());
}

TEST(BlockPoolTest, SharedBlockStaysUntilTheLastReferenceGoes) {
  BlockPool pool(64, 2);
  const int a = *pool.allocate();
  pool.add_ref(a);
  pool.add_ref(a);
  EXPECT_EQ(pool.ref_count(a), 3);
  EXPECT_TRUE(pool.is_shared(a));
  EXPECT_EQ(pool.num_free(), 1);  // sharing takes nothing from the free list

  pool.release(a);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_FALSE(pool.is_shared(a));
  EXPECT_TRUE(pool.is_allocated(a));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(referenced(pool) + pool.num_free(), pool.num_blocks());

  pool.release(a);
  EXPECT_FALSE(pool.is_allocated(a));
  EXPECT_EQ(pool.num_free(), 2);
  // The freed block is handed out again, most recently freed first.
  EXPECT_EQ(*pool.allocate(), a);
}

TEST(BlockPoolTest, ExhaustedPoolRefusesAndRecoversAfterRelease) {
  BlockPool pool(128, 2);
  std::vector<int> ids = {*pool.allocate(), *pool.allocate()};
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int>{0, 1}));
  EXPECT_FALSE(pool.allocate().has_value());
  pool.add_ref(ids[1]);
  pool.release(ids[1]);  // one reference left: still not free
  EXPECT_FALSE(pool.allocate().has_value());
  pool.release(ids[1]);
  EXPECT_EQ(pool.allocate(), ids[1]);
  EXPECT_EQ(referenced(pool), 2);
}

TEST(BlockPoolTest, BlocksAreDisjointAndAligned) {
  BlockPool pool(192, 4);
  for (int id = 0; id < 4; ++id) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.data(id)) % 64, 0u);
    if (id > 0) {
      EXPECT_EQ(pool.data(id) - pool.data(id - 1), 192);
    }
  }
}

// Page-aligned and pinned pools give O_DIRECT-ready blocks. Locking may be
// refused by RLIMIT_MEMLOCK; then the pool still works and says why.
TEST(BlockPoolTest, PinnedPoolIsPageAlignedAndLockedOrSaysWhyNot) {
  for (Memory memory : {Memory::kPageAligned, Memory::kPinned}) {
    BlockPool pool(8192, 3, memory);
    for (int id = 0; id < 3; ++id)
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.data(id)) % 4096, 0u);
    if (memory == Memory::kPageAligned) {
      EXPECT_FALSE(pool.locked());
    } else {
      EXPECT_TRUE(pool.locked() || !pool.lock_error().empty());
      if (!pool.locked()) {
        EXPECT_NE(pool.lock_error().find("mlock"), std::string::npos) << pool.lock_error();
      }
    }
    const int id = *pool.allocate();
    pool.data(id)[8191] = std::byte{7};  // the whole block is usable
    pool.release(id);
    EXPECT_EQ(pool.num_free(), 3);
  }
}

// A pool over memory it did not allocate (the CUDA tiers' device and
// cudaHostAlloc regions; plain host memory here) carves its blocks in place,
// counts references the same way, and gives the memory back through the
// region's deleter exactly once, when the pool goes.
TEST(BlockPoolTest, ExternalRegionIsCarvedInPlaceAndFreedByItsDeleter) {
  std::vector<std::byte> memory(4 * 256 + 100);
  int frees = 0;
  std::byte* freed = nullptr;
  {
    BlockPool pool(256, 4, Region{memory.data(), memory.size(), [&](std::byte* p) {
                                    ++frees;
                                    freed = p;
                                  }});
    EXPECT_EQ(pool.memory(), Memory::kExternal);
    EXPECT_FALSE(pool.locked());
    EXPECT_EQ(pool.capacity_bytes(), 4u * 256);
    for (int id = 0; id < 4; ++id) EXPECT_EQ(pool.data(id), memory.data() + id * 256);
    const int a = *pool.allocate();
    EXPECT_EQ(a, 0);
    pool.add_ref(a);
    EXPECT_TRUE(pool.is_shared(a));
    pool.release(a);
    pool.release(a);
    EXPECT_EQ(pool.num_free(), 4);
    EXPECT_EQ(referenced(pool) + pool.num_free(), pool.num_blocks());
    EXPECT_EQ(frees, 0);
  }
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(freed, memory.data());
}

// Without a deleter the memory stays the caller's: the pool writes through to
// it and leaves it be when it goes.
TEST(BlockPoolTest, ExternalRegionWithoutDeleterStaysTheCallers) {
  std::vector<std::byte> memory(512, std::byte{3});
  {
    BlockPool pool(128, 4, Region{memory.data(), memory.size(), {}});
    const int id = *pool.allocate();
    pool.data(id)[5] = std::byte{9};
  }
  EXPECT_EQ(memory[5], std::byte{9});
  EXPECT_EQ(memory[4], std::byte{3});
}

}  // namespace
}  // namespace kvtier::tiers
