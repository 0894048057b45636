// BlockPool's reference counts: a block is free exactly when its last
// reference is dropped, and free + referenced always adds up to the pool.
#include "tiers/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/smaps.h"

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

// A pool of kHugePageBytes or more starts on a huge-page boundary and asks the
// kernel for huge pages; whether it gets them is the kernel's business, so
// the test asks only whether the kernel took the advice.
TEST(BlockPoolTest, ALargePoolIsAlignedForHugePagesAndAdvisedToUseThem) {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(enabled, modes);
  for (Memory memory : {Memory::kPageable, Memory::kPinned}) {
    BlockPool pool(1 << 20, 3, memory);  // 3 MiB: two huge pages, the second half used
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pool.data(0)) % kHugePageBytes, 0u);
    if (modes.empty() || modes.find("[never]") != std::string::npos) continue;
    EXPECT_EQ(test_util::smaps_field(pool.data(0), "THPeligible"), "1")
        << "transparent huge pages: " << modes;
    EXPECT_EQ(test_util::smaps_field(pool.data(2), "THPeligible"), "1");
  }
  if (modes.empty() || modes.find("[never]") != std::string::npos)
    GTEST_SKIP() << "alignment checked; this kernel has no transparent huge pages to ask for ("
                 << (modes.empty() ? "no /sys/kernel/mm/transparent_hugepage" : modes) << ")";
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
    BlockPool pool(256, 4,
                   Region{.base = memory.data(), .bytes = memory.size(), .free = [&](std::byte* p) {
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
    BlockPool pool(128, 4, Region{.base = memory.data(), .bytes = memory.size()});
    const int id = *pool.allocate();
    pool.data(id)[5] = std::byte{9};
  }
  EXPECT_EQ(memory[5], std::byte{9});
  EXPECT_EQ(memory[4], std::byte{3});
}

// A region with a copy function is memory the host must not address: the
// pool says so and routes its copies through the function; without one the
// pool copies with memcpy.
TEST(BlockPool, CopiesThroughTheRegionsCopyWhenItHasOne) {
  std::vector<std::byte> memory(512, std::byte{0});
  std::vector<std::tuple<std::byte*, const std::byte*, std::size_t>> calls;
  BlockPool pool(128, 4,
                 Region{.base = memory.data(),
                        .bytes = memory.size(),
                        .copy = [&](std::byte* dst, const std::byte* src, std::size_t n) {
                          calls.emplace_back(dst, src, n);
                          std::memcpy(dst, src, n);
                        }});
  EXPECT_FALSE(pool.host_addressable());
  const std::vector<std::byte> host(128, std::byte{7});
  pool.copy(pool.data(1), host.data(), 128);
  pool.copy(pool.data(2), pool.data(1), 64);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1], std::make_tuple(pool.data(2), static_cast<const std::byte*>(pool.data(1)),
                                      std::size_t{64}));
  EXPECT_EQ(memory[128 + 127], std::byte{7});
  EXPECT_EQ(memory[256 + 63], std::byte{7});
  EXPECT_EQ(memory[256 + 64], std::byte{0});

  BlockPool host_pool(128, 2);
  EXPECT_TRUE(host_pool.host_addressable());
  host_pool.copy(host_pool.data(0), host.data(), 128);
  EXPECT_EQ(host_pool.data(0)[100], std::byte{7});
}

}  // namespace
}  // namespace kvtier::tiers
