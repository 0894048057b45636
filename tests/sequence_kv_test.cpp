// SequenceKv's sharing: fork() shares every block without taking any from the
// pool, reserve() copies only a shared partial last block before it is
// written (leaving the other owner's bytes as they were), full shared blocks
// stay shared, and releasing every sharer frees everything.
#include "engine/model/sequence_kv.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace kvtier {
namespace {

constexpr int kPage = 4;
constexpr std::size_t kBlockBytes = 64;

// Fills a block with one byte value, standing in for K/V the model wrote.
void fill(tiers::BlockPool& pool, int id, unsigned char value) {
  std::memset(pool.data(id), value, pool.block_bytes());
}

bool all_bytes(const tiers::BlockPool& pool, int id, unsigned char value) {
  const std::vector<std::byte> want(pool.block_bytes(), std::byte{value});
  return std::memcmp(pool.data(id), want.data(), want.size()) == 0;
}

std::vector<int> ids(const SequenceKv& kv) {
  return {kv.block_ids().begin(), kv.block_ids().end()};
}

// A sequence of `length` positions whose block i is filled with byte i + 1.
SequenceKv filled(tiers::BlockPool& pool, int length) {
  SequenceKv kv(kPage);
  EXPECT_TRUE(kv.reserve(pool, length));
  kv.advance(length);
  for (std::size_t i = 0; i < kv.block_ids().size(); ++i)
    fill(pool, kv.block_ids()[i], static_cast<unsigned char>(i + 1));
  return kv;
}

TEST(SequenceKvTest, ReserveAllocatesWholePagesLazily) {
  tiers::BlockPool pool(kBlockBytes, 4);
  SequenceKv kv(kPage);
  EXPECT_EQ(kv.blocks_needed(pool, 5), 2);
  ASSERT_TRUE(kv.reserve(pool, 5));
  EXPECT_EQ(kv.capacity(), 8);
  EXPECT_EQ(kv.blocks_needed(pool, 8), 0);
  ASSERT_TRUE(kv.reserve(pool, 8));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_FALSE(kv.reserve(pool, 17));  // three more pages, two free: nothing taken
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(kv.capacity(), 8);
  kv.release(pool);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(kv.length(), 0);
}

TEST(SequenceKvTest, ForkSharesEveryBlockAtTheSameLength) {
  tiers::BlockPool pool(kBlockBytes, 8);
  SequenceKv a = filled(pool, 6);  // one full block, one partial
  const int free_before = pool.num_free();
  SequenceKv b = a.fork(pool);
  EXPECT_EQ(b.length(), 6);
  EXPECT_EQ(ids(b), ids(a));
  EXPECT_EQ(pool.num_free(), free_before);
  for (int id : a.block_ids()) EXPECT_EQ(pool.ref_count(id), 2);
  a.release(pool);
  b.release(pool);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(SequenceKvTest, WritingTheSharedPartialBlockCopiesOnlyIt) {
  tiers::BlockPool pool(kBlockBytes, 8);
  SequenceKv a = filled(pool, 6);
  const std::vector<int> original = ids(a);
  SequenceKv b = a.fork(pool);

  // b's next position falls into the shared partial block: one copy, no page.
  EXPECT_EQ(b.blocks_needed(pool, 7), 1);
  ASSERT_TRUE(b.reserve(pool, 7));
  ASSERT_EQ(b.block_ids().size(), 2u);
  EXPECT_EQ(b.block_ids()[0], original[0]);  // the full block stays shared
  EXPECT_NE(b.block_ids()[1], original[1]);  // the partial one was copied
  EXPECT_EQ(pool.ref_count(original[0]), 2);
  EXPECT_EQ(pool.ref_count(original[1]), 1);  // a alone holds it now
  EXPECT_EQ(pool.ref_count(b.block_ids()[1]), 1);
  EXPECT_TRUE(all_bytes(pool, b.block_ids()[1], 2));  // the copy has the bytes

  // b writes its copy (as Model::forward would); a's bytes do not change.
  fill(pool, b.block_ids()[1], 0xEE);
  b.advance(1);
  EXPECT_TRUE(all_bytes(pool, original[1], 2));
  EXPECT_TRUE(all_bytes(pool, original[0], 1));

  // a is now the partial block's only owner: it writes in place.
  EXPECT_EQ(a.blocks_needed(pool, 7), 0);
  ASSERT_TRUE(a.reserve(pool, 7));
  EXPECT_EQ(ids(a), original);

  a.release(pool);
  EXPECT_EQ(pool.ref_count(original[0]), 1);  // b still holds the full block
  b.release(pool);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(SequenceKvTest, FullSharedBlocksAreNeverCopied) {
  tiers::BlockPool pool(kBlockBytes, 8);
  SequenceKv a = filled(pool, 8);  // two full blocks
  SequenceKv b = a.fork(pool);
  // The next position starts a new page: one new block, no copy.
  EXPECT_EQ(b.blocks_needed(pool, 9), 1);
  ASSERT_TRUE(b.reserve(pool, 12));
  EXPECT_EQ(std::vector<int>(b.block_ids().begin(), b.block_ids().begin() + 2), ids(a));
  EXPECT_EQ(b.block_ids().size(), 3u);
  for (int id : a.block_ids()) EXPECT_EQ(pool.ref_count(id), 2);
  a.release(pool);
  b.release(pool);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(SequenceKvTest, CopyAndPagesAreAllOrNothing) {
  tiers::BlockPool pool(kBlockBytes, 3);
  SequenceKv a = filled(pool, 6);  // 2 blocks, 1 free
  SequenceKv b = a.fork(pool);
  // Positions up to 9 need the copy and a third page: two blocks, one free.
  EXPECT_EQ(b.blocks_needed(pool, 9), 2);
  EXPECT_FALSE(b.reserve(pool, 9));
  EXPECT_EQ(ids(b), ids(a));
  EXPECT_EQ(pool.num_free(), 1);
  // Reserving no new position copies nothing.
  EXPECT_EQ(b.blocks_needed(pool, 6), 0);
  ASSERT_TRUE(b.reserve(pool, 6));
  EXPECT_EQ(ids(b), ids(a));
  a.release(pool);
  b.release(pool);
  EXPECT_EQ(pool.num_free(), 3);
}

// Eviction leaves a hole: the entry becomes kEvictedBlock, positions keep
// their pages, the block goes back to the pool, and growing, forking and
// releasing skip the hole.
TEST(SequenceKvTest, EvictedPagesLeaveHolesThatEverythingSkips) {
  tiers::BlockPool pool(kBlockBytes, 8);
  SequenceKv a = filled(pool, 10);  // pages 0, 1 full; page 2 partial
  const std::vector<int> original = ids(a);
  a.evict_block(pool, 0);
  EXPECT_TRUE(a.is_evicted(0));
  EXPECT_EQ(a.block_ids()[0], SequenceKv::kEvictedBlock);
  EXPECT_EQ(a.resident_blocks(), 2);
  EXPECT_EQ(a.length(), 10);
  EXPECT_EQ(a.capacity(), 12);
  EXPECT_FALSE(pool.is_allocated(original[0]));
  EXPECT_EQ(pool.num_free(), 6);

  // Growing past the partial page adds pages at the end; the hole stays.
  EXPECT_EQ(a.blocks_needed(pool, 13), 1);
  ASSERT_TRUE(a.reserve(pool, 13));
  a.advance(3);
  EXPECT_EQ(a.block_ids().size(), 4u);
  EXPECT_TRUE(a.is_evicted(0));

  // A fork shares the resident pages only, the hole included as a hole.
  SequenceKv b = a.fork(pool);
  EXPECT_EQ(ids(b), ids(a));
  EXPECT_EQ(pool.ref_count(original[1]), 2);
  // Evicting a shared page drops one reference; the other owner keeps it.
  b.evict_block(pool, 1);
  EXPECT_EQ(pool.ref_count(original[1]), 1);
  EXPECT_TRUE(all_bytes(pool, original[1], 2));
  EXPECT_FALSE(a.is_evicted(1));

  a.release(pool);
  b.release(pool);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

}  // namespace
}  // namespace kvtier
