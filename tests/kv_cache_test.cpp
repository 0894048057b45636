// KvCache over an L1 in device memory that offers a DeviceLink: L2 in the
// link's host memory, exact L1<->L2 moves on its copy queue, and what happens
// when the queue is lost. The device is the stand-in of stand_in_device.h
// (host memory behind a counting copy, a CopyWorker as the queue); the CUDA
// one runs in cuda_kv_cache_test.cpp where a GPU is. Also the cache's side
// of L3: completions it must not lose or take out of order, and the L1 it
// needs. The scheduler-level tests of the cache are in
// tiered_scheduler_test.cpp.
#include "engine/cache/kv_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "stand_in_device.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

constexpr KvLayout kLayout{4, 4, 32, 16, {}};  // the bundled model's: 64 KiB blocks, 16 KiB layers
constexpr std::uint64_t kFingerprint = 0x6b767469657221ULL;
constexpr int kL1Blocks = 8;

std::vector<int> block_tokens(int seed) {
  std::vector<int> t(static_cast<std::size_t>(kLayout.page_size));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((seed * 7 + i * 3) % 90);
  return t;
}

std::vector<std::byte> random_block(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> b(kLayout.block_bytes());
  for (std::byte& x : b) x = static_cast<std::byte>(rng());
  return b;
}

class KvCacheTest : public ::testing::Test {
 protected:
  KvCacheTest()
      : l1_(kLayout.block_bytes(), kL1Blocks,
            device_.region(kLayout.block_bytes() * kL1Blocks, /*with_link=*/true)) {}

  std::unique_ptr<KvCache> make(bool load_by_layer, const std::filesystem::path& l3 = {}) {
    CacheConfig c;
    c.l2_bytes = 8 * kLayout.block_bytes();
    c.load_by_layer = load_by_layer;
    if (!l3.empty()) {
      c.l3_path = l3.string();
      c.l3_bytes = 64 * kLayout.block_bytes();
    }
    auto cache = KvCache::create(kLayout, kFingerprint, l1_, c);
    EXPECT_TRUE(cache.has_value()) << cache.error();
    return cache ? std::move(*cache) : nullptr;
  }

  // Caches `bytes` under tokens (the cache keeps the only reference).
  void cache_in_l1(KvCache& cache, const std::vector<int>& tokens,
                   const std::vector<std::byte>& bytes) {
    const int block = l1_.allocate().value();
    l1_.copy(l1_.data(block), bytes.data(), bytes.size());
    const int blocks[] = {block};
    cache.insert(cache.root(""), tokens, blocks);
    l1_.release(block);
  }

  // Fills L1 with kL1Blocks cached blocks of random bytes, under the tokens
  // of seeds first, first + 1, ...; returns the bytes in that order.
  std::vector<std::vector<std::byte>> fill_l1(KvCache& cache, int first) {
    std::vector<std::vector<std::byte>> bytes;
    for (int i = 0; i < kL1Blocks; ++i) {
      bytes.push_back(random_block(static_cast<unsigned>(first * 10 + i)));
      cache_in_l1(cache, block_tokens(first + i), bytes.back());
    }
    return bytes;
  }

  // The same, moved down to L2 (the cache keeps the only copy there).
  void cache_in_l2(KvCache& cache, const std::vector<int>& tokens,
                   const std::vector<std::byte>& bytes) {
    cache_in_l1(cache, tokens, bytes);
    ASSERT_EQ(cache.flush(Tier::kL1), 1);
  }

  // Brings the block of tokens up into L1, a block at a time, and returns
  // its bytes; empty if it never arrives.
  std::vector<std::byte> fetch(KvCache& cache, const std::vector<int>& tokens) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      auto lease = cache.acquire_prefix(cache.root(""), tokens, 1, 1);
      if (lease && lease->blocks().size() == 1) {
        std::vector<std::byte> out(kLayout.block_bytes());
        l1_.copy(out.data(), l1_.data(lease->blocks()[0]), out.size());
        return out;  // the lease gives its reference back
      }
      cache.wait(std::chrono::milliseconds(10));
      cache.poll();
    }
    return {};
  }

  test_util::StandInDevice device_;
  tiers::BlockPool l1_;
};

// Promotions, whole or a layer at a time, run on the link's queue and bring
// the bytes back as they went down.
TEST_F(KvCacheTest, ExactPromotionsRunOnTheDevicesCopyQueue) {
  for (const bool by_layer : {false, true}) {
    SCOPED_TRACE(by_layer ? "by layer" : "whole blocks");
    const auto cache = make(by_layer);
    ASSERT_NE(cache, nullptr);
    const std::vector<std::byte> want = random_block(by_layer ? 2 : 1);
    cache_in_l2(*cache, block_tokens(1), want);
    const long queued = device_.queued;
    if (!by_layer) {
      EXPECT_EQ(fetch(*cache, block_tokens(1)), want);
      EXPECT_EQ(device_.queued - queued, 1);
    } else {
      auto lease = cache->acquire_prefix(cache->root(""), block_tokens(1), 1, 1, /*by_layer=*/true);
      ASSERT_TRUE(lease.has_value()) << "a prefix loading by layer is handed out at once";
      const LayerLoad& load = lease->load();
      EXPECT_EQ(load.reads_from().total(), 1);
      EXPECT_EQ(load.reads_from()[Tier::kL2], 1);
      EXPECT_EQ(device_.queued - queued, kLayout.n_layer);
      for (int l = 0; l < kLayout.n_layer; ++l) cache->await_layer(load, l);
      EXPECT_TRUE(cache->settle(load));
      std::vector<std::byte> got(want.size());
      l1_.copy(got.data(), l1_.data(lease->blocks()[0]), got.size());
      EXPECT_EQ(got, want);
      lease.reset();  // gives its reference back
    }
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[1].promotions, 1);
    EXPECT_EQ(st.tier[1].io_errors, 0);
    EXPECT_TRUE(cache->check_invariants());
  }
}

// A queue lost before its copies (copy() refused) or with them in flight
// (poll() fails): the moves are thrown away, never served. A request that
// took the blocks by layer has its pass thrown away by settle(); the block
// stays in L2, and the next fetch brings it up on the copy worker, with the
// bytes that went down.
TEST_F(KvCacheTest, ALostCopyQueueThrowsItsMovesAwayAndTheWorkerTakesOver) {
  for (const bool in_flight : {false, true}) {
    for (const bool by_layer : {false, true}) {
      SCOPED_TRACE(std::string(in_flight ? "lost with copies in flight" : "lost at copy()") +
                   (by_layer ? ", by layer" : ", whole blocks"));
      device_.lose_after = -1;
      const auto cache = make(by_layer);
      ASSERT_NE(cache, nullptr);
      const std::vector<std::byte> want = random_block(in_flight * 2 + by_layer);
      cache_in_l2(*cache, block_tokens(1), want);
      device_.lose_after = device_.queued + (in_flight ? (by_layer ? kLayout.n_layer : 1) : 0);
      auto lease = cache->acquire_prefix(cache->root(""), block_tokens(1), 1, 1, by_layer);
      if (by_layer) {
        ASSERT_TRUE(lease.has_value());
        for (int l = 0; l < kLayout.n_layer; ++l) cache->await_layer(lease->load(), l);
        EXPECT_FALSE(cache->settle(lease->load())) << "a pass on copies that never landed was kept";
        lease.reset();
      } else {
        EXPECT_FALSE(lease.has_value());
        cache->drain();  // ends, though the lost queue never reports its copy
      }
      const long queued = device_.queued;
      EXPECT_EQ(fetch(*cache, block_tokens(1)), want);
      EXPECT_EQ(device_.queued, queued) << "the lost queue was used again";
      const CacheStats st = cache->stats();
      EXPECT_EQ(st.tier[1].io_errors, 1);
      EXPECT_EQ(st.tier[1].promotions, 1);
      EXPECT_EQ(cache->transfers_in_flight(), 0u);
      EXPECT_TRUE(cache->check_invariants());
      ASSERT_FALSE(cache->warnings().empty());
      EXPECT_TRUE(contains(cache->warnings().back(), "copy queue failed"))
          << cache->warnings().back();
    }
  }
}

// Cleaning copies L1 blocks to L2 ahead of their demotion, on the queue; a
// queue lost meanwhile gives the L2 slots back and leaves the blocks in L1.
TEST_F(KvCacheTest, CleaningRunsOnTheQueueAndALostOneLeavesTheBlocksInL1) {
  for (const bool lose : {false, true}) {
    SCOPED_TRACE(lose ? "lost" : "not lost");
    device_.lose_after = -1;
    const auto cache = make(true);
    ASSERT_NE(cache, nullptr);
    // Fill L1 with cached blocks: cleaning starts when few are free.
    const std::vector<std::vector<std::byte>> want = fill_l1(*cache, 10);
    if (lose) device_.lose_after = device_.queued + 1;
    const long queued = device_.queued;
    cache->poll();  // starts cleaning
    EXPECT_GT(device_.queued, queued) << "cleaning did not use the queue";
    cache->drain();
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[1].io_errors, lose ? 1 : 0);
    if (lose)
      EXPECT_EQ(st.cleaned, 0);
    else
      EXPECT_GT(st.cleaned, 0);
    EXPECT_EQ(st.tier[0].used_blocks, static_cast<std::size_t>(kL1Blocks));
    EXPECT_EQ(st.tier[1].used_blocks, static_cast<std::size_t>(st.cleaned));
    EXPECT_TRUE(cache->check_invariants());
    // Every block still comes back as it was, from L1.
    for (int i = 0; i < kL1Blocks; ++i) EXPECT_EQ(fetch(*cache, block_tokens(10 + i)), want[i]);
  }
}

// A flush queues its copies to L2 together and waits once: each block goes
// on the device's queue exactly once, its demotion is then a release, and
// the copies are demotions, not cleaning. With a queue lost on the way, the
// blocks it dropped are copied again the old way: nothing is lost.
TEST_F(KvCacheTest, AFlushQueuesItsCopiesToL2TogetherAndLosesNothing) {
  for (const bool lose : {false, true}) {
    SCOPED_TRACE(lose ? "queue lost on the third copy" : "queue kept");
    device_.lose_after = -1;
    const auto cache = make(false);
    ASSERT_NE(cache, nullptr);
    const std::vector<std::vector<std::byte>> want = fill_l1(*cache, 30);
    const long queued = device_.queued;
    const long copies = device_.copies;
    const long notifies = device_.notifies;
    if (lose) device_.lose_after = device_.queued + 3;
    EXPECT_EQ(cache->flush(Tier::kL1), kL1Blocks);
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[0].used_blocks, 0u);
    EXPECT_EQ(st.tier[1].used_blocks, static_cast<std::size_t>(kL1Blocks));
    EXPECT_EQ(st.tier[1].demotions, kL1Blocks);
    EXPECT_EQ(st.cleaned, 0);
    if (!lose) {
      EXPECT_EQ(device_.queued - queued, kL1Blocks) << "each block once, on the queue";
      EXPECT_EQ(device_.notifies.load(), notifies)
          << "the engine waited; no wake-up stalled the queue";
      EXPECT_EQ(device_.copies.load(), copies) << "no block copied on the engine thread";
    } else {
      EXPECT_EQ(st.tier[1].io_errors, 1);
      EXPECT_GT(device_.copies.load(), copies) << "the lost copies were made again off the queue";
    }
    EXPECT_TRUE(cache->check_invariants());
    for (int i = 0; i < kL1Blocks; ++i) EXPECT_EQ(fetch(*cache, block_tokens(30 + i)), want[i]);
  }
}

// An exact L2 slot is host memory laid out as an exact L3 stores it: it is
// written as it is, with no copy through the device's staging path, and comes
// back as it went down.
TEST_F(KvCacheTest, AnL2BlockGoesToL3WithNoCopyOffTheDevice) {
  test_util::TempDir dir;
  const std::vector<std::byte> want = random_block(11);
  {
    const auto cache = make(false, dir.path() / "l3");
    ASSERT_NE(cache, nullptr);
    cache_in_l2(*cache, block_tokens(1), want);
    const long copies = device_.copies;
    EXPECT_EQ(cache->persist(), 1);
    cache->drain();
    EXPECT_EQ(device_.copies - copies, 0);
    EXPECT_EQ(cache->stats().tier[2].used_blocks, 1u);
  }
  const auto cache = make(false, dir.path() / "l3");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(fetch(*cache, block_tokens(1)), want);
}

// The cache's contents as a stream (KvCache::watch): replaying the events
// from an empty cache gives exactly the blocks stored_blocks() lists, each
// event consistent with those before it (a block arrives where it was not,
// leaves where it was), through demotion to L2, write-back to L3, promotion
// and flushes; and a cleared listener hears nothing more.
TEST_F(KvCacheTest, WatchedEventsAddUpToTheStoredBlocks) {
  test_util::TempDir dir;
  const auto cache = make(false, dir.path() / "l3");
  ASSERT_NE(cache, nullptr);
  std::set<std::pair<tiers::BlockKey, int>> replayed;
  PerTier<int> arrivals;
  long inconsistent = 0;
  cache->watch([&](const BlockEvent& e) {
    const auto where = std::make_pair(e.key, static_cast<int>(e.tier));
    if (e.stored) {
      ++arrivals[e.tier];
      inconsistent += !replayed.insert(where).second;
    } else {
      inconsistent += replayed.erase(where) != 1;
    }
  });
  const auto bytes = fill_l1(*cache, 0);
  EXPECT_EQ(cache->flush(Tier::kL1), kL1Blocks);
  cache->persist();  // whatever write-back has not written yet
  cache->drain();
  cache->poll();
  EXPECT_EQ(fetch(*cache, block_tokens(3)), bytes[3]);
  EXPECT_GT(cache->flush(Tier::kL2), 0);
  cache->drain();
  cache->poll();

  EXPECT_EQ(inconsistent, 0);
  EXPECT_EQ(arrivals[Tier::kL1], kL1Blocks + 1) << "eight inserted, one promoted";
  EXPECT_EQ(arrivals[Tier::kL2], kL1Blocks);
  EXPECT_GT(arrivals[Tier::kL3], 0);
  std::set<std::pair<tiers::BlockKey, int>> now;
  for (const BlockEvent& e : cache->stored_blocks()) {
    EXPECT_TRUE(e.stored);
    now.emplace(e.key, static_cast<int>(e.tier));
  }
  EXPECT_EQ(replayed, now);

  cache->watch({});
  const std::size_t before = replayed.size();
  cache_in_l1(*cache, block_tokens(40), random_block(40));
  EXPECT_EQ(replayed.size(), before) << "a cleared listener still heard the cache";
}

// L3 commits a write on its own thread, and may evict that block for the
// next write before the cache has polled the first one's completion. The
// tree must not then count the block as on L3: it would drop its last copy
// elsewhere as clean, and a restart would not find it.
TEST_F(KvCacheTest, ABlockEvictedBeforeItsWriteIsPolledIsNotCountedOnL3) {
  test_util::TempDir dir;
  CacheConfig c;
  c.write_policy = WritePolicy::kWriteThrough;
  c.l3_path = (dir.path() / "l3").string();
  c.l3_bytes = kLayout.block_bytes();  // one slot: the second write evicts the first
  // The first write must have been committed when the second is made, or the
  // second finds no room and nothing is evicted: wait longer each round.
  bool evicted = false;
  for (int wait_ms = 20; !evicted && wait_ms <= 2560; wait_ms *= 2) {
    std::filesystem::remove_all(dir.path() / "l3");
    auto cache = KvCache::create(kLayout, kFingerprint, l1_, c);
    ASSERT_TRUE(cache.has_value()) << cache.error();
    cache_in_l1(**cache, block_tokens(1), random_block(1));  // written through
    (*cache)->poll();  // submits the write; its completion waits for the next poll
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    cache_in_l1(**cache, block_tokens(2), random_block(2));
    (*cache)->drain();
    const RadixCache& tree = (*cache)->tree();
    auto node_of = [&](int seed) -> const CacheNode* {
      const auto path = tree.match((*cache)->root(""), block_tokens(seed), 1);
      return path.empty() ? nullptr : path[0];
    };
    evicted = node_of(2) != nullptr && node_of(2)->stored(Tier::kL3);
    if (!evicted) continue;
    ASSERT_NE(node_of(1), nullptr) << "still in L1";
    EXPECT_FALSE(node_of(1)->stored(Tier::kL3)) << "evicted from L3";
    EXPECT_EQ(tree.count(Tier::kL3), (*cache)->stats().tier[2].used_blocks);
    EXPECT_EQ((*cache)->stats().tier[2].dropped, 1);
    EXPECT_TRUE((*cache)->check_invariants());
  }
  EXPECT_TRUE(evicted) << "the second write never found the first committed";
}

// calibrate() reads and writes L3 itself and takes its own completions: a
// write already in flight must still complete for the cache, or drain()
// would wait for it for ever.
TEST_F(KvCacheTest, CalibratingWithAWriteInFlightLosesNoCompletion) {
  test_util::TempDir dir;
  const auto cache = make(false, dir.path() / "l3");
  ASSERT_NE(cache, nullptr);
  cache_in_l2(*cache, block_tokens(1), random_block(1));  // L1 is free again
  cache->poll();                                          // write-back starts its L3 write
  ASSERT_EQ(cache->transfers_in_flight(), 1u);
  const TierCosts costs = cache->calibrate();
  EXPECT_GT(costs.load[Tier::kL3].per_block_s, 0) << "L3 was measured";
  for (int i = 0; i < 1000 && cache->transfers_in_flight() > 0; ++i) {
    cache->wait(std::chrono::milliseconds(10));
    cache->poll();
  }
  ASSERT_EQ(cache->transfers_in_flight(), 0u) << "a completion was lost";
  const auto path = cache->tree().match(cache->root(""), block_tokens(1), 1);
  ASSERT_EQ(path.size(), 1u);
  EXPECT_TRUE(path[0]->stored(Tier::kL3));
}

// L3 moves host L1 blocks in place with O_DIRECT: an L1 pool that does not
// start on a page is refused with the reason, not left to fail every read.
TEST(KvCacheL3, AnL1PoolOffThePageIsRefusedWithL3) {
  test_util::TempDir dir;
  const std::size_t bytes = 2 * kLayout.block_bytes() + 4096;
  auto* memory = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{4096}));
  // Host memory (no copy function) starting 64 bytes into a page.
  tiers::BlockPool l1(
      kLayout.block_bytes(), 2,
      tiers::Region{.base = memory + 64, .bytes = bytes - 64, .free = [=](std::byte*) {
                      ::operator delete (memory, std::align_val_t{4096});
                    }});
  CacheConfig c;
  c.l3_path = (dir.path() / "l3").string();
  c.l3_bytes = 4 * kLayout.block_bytes();
  const auto refused = KvCache::create(kLayout, kFingerprint, l1, c);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "4096-byte boundary")) << refused.error();
  c.l3_path.clear();
  EXPECT_TRUE(KvCache::create(kLayout, kFingerprint, l1, c).has_value()) << "fine without L3";
}

// What comes off a failed device is garbage that an L3 checksum would vouch
// for, and a restart on a working device would serve: once the device says
// it failed, L3 takes no more writes, from L1 or from L2, and keeps what it
// had. A restart finds the block written before, and not those after.
TEST_F(KvCacheTest, AFailedDeviceWritesNothingMoreToL3) {
  test_util::TempDir dir;
  const std::vector<std::byte> before = random_block(7);
  {
    const auto cache = make(false, dir.path() / "l3");
    ASSERT_NE(cache, nullptr);
    cache_in_l1(*cache, block_tokens(1), before);
    EXPECT_EQ(cache->persist(), 1);
    cache_in_l1(*cache, block_tokens(2), random_block(8));  // stays in L1
    cache_in_l1(*cache, block_tokens(3), random_block(9));
    ASSERT_TRUE(cache->flush(Tier::kL1) >= 2);  // 2 and 3 (and 1) go to L2
    cache_in_l1(*cache, block_tokens(4), random_block(10));
    device_.failed = true;
    EXPECT_EQ(cache->persist(), 0);
    cache->poll();  // write_back would start writes of the L2 blocks here
    cache->drain();
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[0].io_errors, 1);
    EXPECT_EQ(st.tier[2].used_blocks, 1u);
    EXPECT_TRUE(cache->check_invariants());
    ASSERT_FALSE(cache->warnings().empty());
    EXPECT_TRUE(contains(cache->warnings().back(), "stand-in device failed"))
        << cache->warnings().back();
  }  // the destructor's persist() writes nothing either
  device_.failed = false;
  const auto cache = make(false, dir.path() / "l3");
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->lookup(cache->root(""), block_tokens(1), 1).blocks[2], 1);
  for (int t : {2, 3, 4})
    EXPECT_EQ(cache->lookup(cache->root(""), block_tokens(t), 1).total_blocks(), 0) << t;
  EXPECT_EQ(fetch(*cache, block_tokens(1)), before);
}

}  // namespace
}  // namespace kvtier
