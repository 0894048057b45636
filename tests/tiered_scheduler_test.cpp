// The scheduler with the prefix cache and its tiers, on the bundled model:
// shared prefixes, demotion to L2 and L3 and promotion back, swap preemption,
// a restart on the same L3 directory, a corrupted slab, tenant salts and an
// unusable L3. In every case each request's tokens must equal running it
// alone with generate(), bit for bit, and check_invariants() (the block
// conservation of the pool and the cache) holds after every step.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/slow_disk.h"
#include "engine/cache/block_hash.h"
#include "engine/scheduling/scheduler.h"
#include "scheduler_test_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

using test_util::alone;
using test_util::greedy;
using test_util::make_scheduler;
using test_util::sampled;

const std::string kShared =
    "Q: What is the difference between a duck? A: One of its legs is both the same. "
    "And the other";

class TieredSchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = &test_util::bundled_model().model;
    tokenizer_ = test_util::bundled_model().tokenizer.get();
  }

  // With the tenant salt this suite varies.
  RequestParams params(std::string_view prompt, int max_tokens, SamplingParams sampling,
                       std::string salt = "") {
    RequestParams p = test_util::request_params(prompt, max_tokens, sampling);
    p.cache_salt = std::move(salt);
    return p;
  }

  // Submits every request, steps until done with the invariants checked after
  // each step, and compares every request with its solo run.
  static ::testing::AssertionResult run_and_compare(Scheduler& s,
                                                    const std::vector<RequestParams>& reqs,
                                                    std::vector<RequestId>* ids_out = nullptr) {
    std::vector<RequestId> ids;
    if (auto ran = test_util::submit_and_run(s, reqs, ids); !ran) return ran;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const Request* r = s.find(ids[i]);
      const std::vector<int> got(r->generated().begin(), r->generated().end());
      if (got != alone(reqs[i]).tokens)
        return ::testing::AssertionFailure() << "request " << i << " differs from its solo run";
    }
    if (ids_out) *ids_out = ids;
    return ::testing::AssertionSuccess();
  }

  // Steps until every submitted request is done, with the invariants checked
  // after each step, and compares requests ids[i] with reqs[i]'s solo run.
  static ::testing::AssertionResult finish_and_compare(Scheduler& s,
                                                       const std::vector<RequestId>& ids,
                                                       const std::vector<RequestParams>& reqs) {
    for (int guard = 0; s.has_work() && guard < 50000; ++guard) {
      (void)s.step();
      if (auto ok = s.check_invariants(); !ok)
        return ::testing::AssertionFailure() << "invariants: " << ok.error();
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const Request* r = s.find(ids[i]);
      if (std::vector<int>(r->generated().begin(), r->generated().end()) != alone(reqs[i]).tokens)
        return ::testing::AssertionFailure() << "request " << i << " differs from its solo run";
    }
    return ::testing::AssertionSuccess();
  }

  // Rounds of four requests whose prompts share prefixes of different
  // lengths (round 1 sampled, the others greedy): under a small L1 and L2
  // they push each other's blocks down the tiers and back.
  std::vector<std::vector<RequestParams>> pressure_rounds(int rounds) {
    const std::vector<std::string> stems = {"Love is a ", "The fortune you seek ",
                                            "It is a truth universally ", "A bird in the hand "};
    std::vector<std::vector<RequestParams>> out(static_cast<std::size_t>(rounds));
    for (int round = 0; round < rounds; ++round)
      for (std::size_t i = 0; i < stems.size(); ++i)
        out[round].push_back(params(stems[i] + kShared.substr(0, 40 + 8 * i), 6,
                                    round == 1 ? sampled(round * 10 + i) : greedy()));
    return out;
  }

  static SchedulerConfig tiered(const std::filesystem::path& l3 = {}) {
    SchedulerConfig c;
    c.prefix_cache = true;
    c.max_kv_tokens = 4096;
    c.max_batch_size = 4;
    c.token_budget = 32;
    c.cache.l2_bytes = 16 * 65536;
    if (!l3.empty()) {
      c.cache.l3_path = l3.string();
      c.cache.l3_bytes = 256 * 65536;
    }
    return c;
  }

  // A write-through scheduler with L3 in `l3` that has served kShared +
  // " one", with the prompt's blocks on L3 only, block `damaged` of them
  // damaged; null (with the failure recorded) if that could not be set up.
  std::unique_ptr<Scheduler> with_a_damaged_l3_block(const std::filesystem::path& l3,
                                                     int damaged = 1, bool load_by_layer = true) {
    SchedulerConfig c = tiered(l3);
    c.cache.write_policy = WritePolicy::kWriteThrough;
    c.cache.load_by_layer = load_by_layer;
    auto s = make_scheduler(c);
    if (s == nullptr) return nullptr;
    EXPECT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
    s->cache()->drain();
    s->cache()->flush(Tier::kL1);
    s->cache()->flush(Tier::kL2);
    // Write-through stored the prompt's blocks in order into slots 0, 1, ...
    const std::size_t block = model_->kv_layout(16).block_bytes();
    const int fd = ::open((l3 / "slab").c_str(), O_WRONLY);
    const std::vector<char> junk(64, 0x5a);
    const auto at = static_cast<off_t>(block * static_cast<std::size_t>(damaged) + 4096);
    const bool written = fd >= 0 && ::pwrite(fd, junk.data(), junk.size(), at) == 64;
    if (fd >= 0) ::close(fd);
    EXPECT_TRUE(written) << "could not damage the slab";
    return written ? std::move(s) : nullptr;
  }

  // Staged figures under which reading a block from L3 costs what
  // recomputing its 16 tokens does (1 ms a row, 16 ms a block): a cached
  // run is split, its front recomputed while the rest loads.
  static TierCosts close_costs() {
    TierCosts k;
    k.prefill = {{16, 16e-3, 1}, {128, 128e-3, 1}};
    k.load[Tier::kL3] = {0, 16e-3, 1};
    return k;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};

Model* TieredSchedulerTest::model_ = nullptr;
Tokenizer* TieredSchedulerTest::tokenizer_ = nullptr;

TEST_F(TieredSchedulerTest, SharedPrefixIsServedFromL1AndTokensMatch) {
  auto s = make_scheduler(tiered());
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 12, greedy())}));
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(
      *s, {params(kShared + " two", 12, greedy()), params(kShared + " three", 12, sampled(7))},
      &ids));
  const int prompt_blocks = static_cast<int>(kShared.size()) / 16;
  for (RequestId id : ids) {
    const Request* r = s->find(id);
    EXPECT_EQ(r->cached_tokens()[0], prompt_blocks * 16) << "request " << id;
    EXPECT_EQ(r->cached_tokens()[1] + r->cached_tokens()[2], 0);
  }
  const CacheStats st = s->cache()->stats();
  EXPECT_GE(st.recompute_tokens_avoided, 2L * prompt_blocks * 16);
  EXPECT_GT(st.tier[0].hits, 0);
}

// A request that waits for its prefix to come up from L2 looks again every
// step: the cache counts one lookup, each block once, as a hit of the tier
// it came from, and the blocks no tier had as misses once.
TEST_F(TieredSchedulerTest, APromotedPrefixIsCountedOnceWhereItCameFrom) {
  auto s = make_scheduler(tiered());
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
  s->cache()->drain();
  s->cache()->flush(Tier::kL1);
  const CacheStats before = s->cache()->stats();
  const std::string prompt = kShared + " two and a few more words, for blocks of its own here";
  ASSERT_TRUE(run_and_compare(*s, {params(prompt, 4, greedy())}));
  const CacheStats after = s->cache()->stats();
  const long cached = static_cast<long>(kShared.size()) / 16;
  const long full = (static_cast<long>(prompt.size()) - 1) / 16;  // the last token is fed
  EXPECT_EQ(after.lookups - before.lookups, 1);
  EXPECT_EQ(after.tier[1].hits - before.tier[1].hits, cached);
  EXPECT_EQ(after.tier[0].hits - before.tier[0].hits, 0);
  EXPECT_EQ(after.missed_blocks - before.missed_blocks, full - cached);
}

TEST_F(TieredSchedulerTest, SaltsNeverShareBlocks) {
  auto s = make_scheduler(tiered());
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared, 4, greedy(), "tenant-a")}));
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(
      *s, {params(kShared, 4, greedy(), "tenant-b"), params(kShared, 4, greedy(), "tenant-a")},
      &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[0], 0);
  EXPECT_GT(s->find(ids[1])->cached_tokens()[0], 0);
}

// Write-through puts every block on L3; flushing L1 and L2 leaves L3 as the
// only copy, so the second pass must promote from L3.
TEST_F(TieredSchedulerTest, BlocksFlushedToL3ComeBackBitIdentical) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->cache()->stats().tier[2].available);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 8, greedy())}));
  s->cache()->drain();
  EXPECT_GT(s->cache()->flush(Tier::kL1), 0);
  s->cache()->flush(Tier::kL2);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 8, sampled(3))}, &ids));
  const Request* r = s->find(ids[0]);
  EXPECT_EQ(r->cached_tokens()[2], static_cast<int>(kShared.size()) / 16 * 16);
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_EQ(st.tier[2].checksum_failures, 0);
}

// A request whose prefix is coming up from L3 keeps its place in the queue
// but does not hold back the request behind it, which needs no read. (With
// whole-block reads; by layer it does not wait at all: see the next test.)
TEST_F(TieredSchedulerTest, ARequestWaitingForL3ReadsDoesNotHoldBackTheNext) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  c.cache.load_by_layer = false;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
  s->cache()->drain();
  s->cache()->flush(Tier::kL1);
  s->cache()->flush(Tier::kL2);  // the prefix is on L3 only

  const std::vector<RequestParams> reqs = {params(kShared + " two", 6, greedy()),
                                           params("Unrelated and short", 6, greedy())};
  const RequestId loading = *s->submit(reqs[0]);
  const RequestId next = *s->submit(reqs[1]);
  (void)s->step();  // starts the reads: they complete at a later poll()
  EXPECT_EQ(s->status(loading), RequestStatus::kWaiting);
  EXPECT_NE(s->status(next), RequestStatus::kWaiting) << "held back behind the L3 reads";
  ASSERT_TRUE(finish_and_compare(*s, {loading, next}, reqs));
  EXPECT_GT(s->find(loading)->cached_tokens()[2], 0) << "the prefix did not come from L3";
}

// Loaded by layer, a prefix on L3 is no reason to wait: the request is
// admitted with its blocks still on their way up, its prefill takes each
// layer as it arrives, and its first token comes in the first step, the same
// token. From L2 into a host L1 the blocks come up whole (a copy between host
// pools is a core's work, see CacheConfig::load_by_layer): the request waits
// for them, and gets the same tokens.
TEST_F(TieredSchedulerTest, LoadByLayerServesAnL3PrefixAtOnceAndCopiesL2BlocksWhole) {
  for (const Tier tier : {Tier::kL2, Tier::kL3}) {
    SCOPED_TRACE(tier == Tier::kL2 ? "from L2" : "from L3");
    test_util::TempDir dir;
    SchedulerConfig c = tiered(dir.path() / "l3");
    c.cache.write_policy = WritePolicy::kWriteThrough;
    ASSERT_TRUE(c.cache.load_by_layer);
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
    s->cache()->drain();
    s->cache()->flush(Tier::kL1);
    if (tier == Tier::kL3) s->cache()->flush(Tier::kL2);

    const std::vector<RequestParams> reqs = {params(kShared + " two", 6, sampled(5)),
                                             params("Unrelated and short", 6, greedy())};
    const RequestId loading = *s->submit(reqs[0]);
    const RequestId next = *s->submit(reqs[1]);
    (void)s->step();
    ASSERT_TRUE(s->check_invariants());
    if (tier == Tier::kL3)
      EXPECT_EQ(s->find(loading)->generated().size(), 1u) << "waited for its whole blocks";
    else
      EXPECT_EQ(s->find(loading)->generated().size(), 0u) << "L2 blocks came up by layer";
    EXPECT_NE(s->status(next), RequestStatus::kWaiting);
    ASSERT_TRUE(finish_and_compare(*s, {loading, next}, reqs));
    const int t = static_cast<int>(tier);
    EXPECT_EQ(s->find(loading)->cached_tokens()[t], static_cast<int>(kShared.size()) / 16 * 16);
    EXPECT_GT(s->cache()->stats().tier[t].promotions, 0);
    EXPECT_EQ(s->stats().discarded_passes, 0);
  }
}

// One block of a prefix loading by layer is corrupt on L3. The pass that
// used it is thrown away, not a token of it is sent, the block is gone from
// the cache, and the request prefills from that block on: the same tokens.
TEST_F(TieredSchedulerTest, ACorruptBlockLoadingByLayerThrowsThePassAwayAndIsRecomputed) {
  test_util::TempDir dir;
  auto s = with_a_damaged_l3_block(dir.path() / "l3");
  ASSERT_NE(s, nullptr);

  std::vector<RequestId> ids;
  const CacheStats before = s->cache()->stats();
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 8, greedy())}, &ids));
  const CacheStats st = s->cache()->stats();
  EXPECT_EQ(st.tier[2].checksum_failures, 1);
  // Counted once, for the block before the damaged one: not for the
  // thrown-away pass's blocks as well.
  EXPECT_EQ(st.recompute_tokens_avoided - before.recompute_tokens_avoided, 16);
  EXPECT_EQ(st.lookups - before.lookups, 1);
  EXPECT_EQ(st.tier[2].hits - before.tier[2].hits, 1);
  EXPECT_EQ(st.missed_blocks - before.missed_blocks,
            static_cast<long>(kShared.size() + 4 - 1) / 16 - 1);
  EXPECT_EQ(s->stats().discarded_passes, 1);
  // What the request computed from: the one block before the damage, not
  // every block the first look found (as was once reported).
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{0, 0, 16}}));
}

// The same damage, found while the request waits behind another's prefill
// and then cancelled before its own pass: the block the read filled holds
// the damaged bytes, and the cancelled request must not hand it to the cache
// as that prefix's KV. A later request with the prefix gets the right tokens.
TEST_F(TieredSchedulerTest, ACancelledRequestDoesNotCacheABlockWhoseLoadFailed) {
  test_util::TempDir dir;
  auto s = with_a_damaged_l3_block(dir.path() / "l3");
  ASSERT_NE(s, nullptr);

  // First in line, and longer than the token budget: its prefill takes the
  // next steps, while the second request's prefix lands by layer.
  const std::vector<RequestParams> reqs = {params(std::string(100, 'x') + kShared, 4, greedy()),
                                           params(kShared + " two", 4, greedy())};
  const RequestId busy = *s->submit(reqs[0]);
  const RequestId loading = *s->submit(reqs[1]);
  (void)s->step();
  ASSERT_EQ(s->status(loading), RequestStatus::kPrefilling);
  s->cache()->drain();
  (void)s->step();  // its poll finds the checksum failure
  ASSERT_EQ(s->cache()->stats().tier[2].checksum_failures, 1);
  ASSERT_EQ(s->status(loading), RequestStatus::kPrefilling) << "not yet prefilled";
  ASSERT_TRUE(s->cancel(loading));
  ASSERT_TRUE(s->check_invariants());

  const RequestParams again = params(kShared + " three", 8, greedy());
  const RequestId later = *s->submit(again);
  ASSERT_TRUE(finish_and_compare(*s, {busy, later}, {reqs[0], again}));
}

// A tiny L1 and L2 under many requests with shared prefixes: blocks are
// demoted to L2 and written back to L3, and later requests promote them.
TEST_F(TieredSchedulerTest, HeavyPressureDemotesAndPromotesWithoutChangingTokens) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.max_kv_tokens = 160;  // 10 blocks
  c.cache.l2_bytes = 6 * 65536;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  const auto rounds = pressure_rounds(3);
  for (std::size_t round = 0; round < rounds.size(); ++round)
    ASSERT_TRUE(run_and_compare(*s, rounds[round])) << "round " << round;
  s->cache()->drain();
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[1].demotions, 0);
  EXPECT_GT(st.tier[2].demotions, 0);   // write_back: blocks that reached L2 went on to L3
  EXPECT_GT(st.tier[1].promotions, 0);  // copied up by the copy worker
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_GT(st.cleaned, 0) << "no L1 block was copied to L2 ahead of its demotion";
  EXPECT_GT(st.recompute_tokens_avoided, 0);
}

// An L1 the host may address only through its pool's copy, as in device
// memory (here the stand-in of stand_in_device.h, which the CPU forward can
// still compute on): the device-L1 paths of the cache (L2 promotions a layer
// at a time, L3 through staging buffers, int8 through a host buffer) under
// the same pressure, with every request's tokens equal to its solo run for
// exact tiers, and the same tokens as over a host L1 for int8 ones. With the
// device's link, exact L1<->L2 moves run on its copy queue; a queue lost
// halfway has its moves thrown away (passes computed on them included), and
// the tokens stay the same.
TEST_F(TieredSchedulerTest, AnL1OnlyItsCopyReachesServesTheSameTokens) {
  const auto rounds = pressure_rounds(2);
  struct Case {
    const char* name;
    KvFormat format;
    bool link;
    long lose_after;
  };
  for (const Case& k :
       {Case{"exact", KvFormat::kExact, false, -1}, Case{"int8", KvFormat::kInt8, false, -1},
        Case{"exact, copy queue", KvFormat::kExact, true, -1},
        Case{"exact, copy queue lost", KvFormat::kExact, true, 10}}) {
    SCOPED_TRACE(k.name);
    test_util::TempDir dir;
    SchedulerConfig c = tiered(dir.path() / "l3");
    c.max_kv_tokens = 160;  // 10 blocks
    c.cache.l2_bytes = 6 * 65536;
    c.cache.l2_format = c.cache.l3_format = k.format;
    const auto shape = Scheduler::l1_shape(model_->kv_layout(c.page_size), c);
    test_util::StandInDevice device;
    device.lose_after = k.lose_after;
    tiers::BlockPool l1(
        shape.block_bytes, shape.blocks,
        device.region(shape.block_bytes * static_cast<std::size_t>(shape.blocks), k.link));
    auto s = Scheduler::create(*model_, tokenizer_, c, &l1);
    ASSERT_TRUE(s.has_value()) << s.error();
    std::vector<std::vector<int>> got;
    for (std::size_t round = 0; round < rounds.size(); ++round) {
      if (k.format == KvFormat::kExact) {
        ASSERT_TRUE(run_and_compare(**s, rounds[round])) << "round " << round;
        continue;
      }
      std::vector<RequestId> ids;
      ASSERT_TRUE(test_util::submit_and_run(**s, rounds[round], ids));
      for (RequestId id : ids) {
        const Request* r = (*s)->find(id);
        got.emplace_back(r->generated().begin(), r->generated().end());
      }
    }
    (*s)->cache()->drain();
    const CacheStats st = (*s)->cache()->stats();
    // From L2, or from L3 when write-back had made the L2 copies clean and
    // L2 let them go first: which, the timing of the writes decides (once,
    // on a busy machine, none came from L2). KvCacheTest covers promotions
    // from L2 over a device L1 on their own.
    EXPECT_GT(st.tier[1].promotions + st.tier[2].promotions, 0);
    EXPECT_GT(st.tier[2].demotions, 0);
    EXPECT_EQ(st.tier[2].checksum_failures, 0);
    EXPECT_GT(device.copies.load(), 0) << "nothing went through the pool's copy";
    if (k.link && k.format == KvFormat::kExact) {
      EXPECT_GE(device.queued.load(), k.lose_after < 0 ? 1 : k.lose_after)
          << "the copy queue was not used";
      EXPECT_EQ(st.tier[1].io_errors, k.lose_after < 0 ? 0 : 1);
    } else {
      EXPECT_EQ(device.queued.load(), 0);
    }
    if (k.format == KvFormat::kExact) continue;
    // int8 is lossy: the reference is the same work over a host L1.
    test_util::TempDir host_dir;
    c.cache.l3_path = (host_dir.path() / "l3").string();
    auto host = make_scheduler(c);
    ASSERT_NE(host, nullptr);
    std::vector<std::vector<int>> want;
    for (const std::vector<RequestParams>& part : rounds) {
      std::vector<RequestId> ids;
      ASSERT_TRUE(test_util::submit_and_run(*host, part, ids));
      for (RequestId id : ids) {
        const Request* r = host->find(id);
        want.emplace_back(r->generated().begin(), r->generated().end());
      }
    }
    EXPECT_EQ(got, want);
  }
}

// Waiting requests whose prefixes come up whole from L2 into an L1 that
// holds one of them at a time: each starts its promotions only when it fits
// beside those already landing for the requests ahead. (They once took
// turns for ever, the promotions of one pushing the other's landed blocks
// back down: 'no end after 50000 steps' in about one run in three.)
TEST_F(TieredSchedulerTest, RequestsLoadingFromL2DoNotPushEachOtherOutForEver) {
  const auto rounds = pressure_rounds(2);
  for (int run = 0; run < 12; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    SchedulerConfig c = tiered();
    c.max_kv_tokens = 160;  // 10 blocks: one of these requests at a time
    c.cache.l2_bytes = 19 * 65536;
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    for (std::size_t round = 0; round < rounds.size(); ++round) {
      std::vector<RequestId> ids;
      ASSERT_TRUE(test_util::submit_and_run(*s, rounds[round], ids, 5000)) << "round " << round;
    }
    EXPECT_GT(s->cache()->stats().tier[1].promotions, 0);
  }
}

// The tree mirrors L3: blocks the store evicts by itself to make room leave
// the tree too, so it stays as large as what the tiers hold however many
// requests go by (a soak once saw it grow by a node per request).
TEST_F(TieredSchedulerTest, TheTreeForgetsBlocksL3EvictsAndStaysBounded) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.max_kv_tokens = 160;  // 10 blocks
  c.cache.l2_bytes = 4 * 65536;
  c.cache.l3_bytes = 8 * 65536;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  for (int wave = 0; wave < 6; ++wave) {
    std::vector<RequestParams> part;
    for (int i = 0; i < 4; ++i)
      part.push_back(params(std::to_string(wave * 4 + i) + kShared.substr(0, 50), 3, greedy()));
    ASSERT_TRUE(run_and_compare(*s, part)) << "wave " << wave;
  }
  s->cache()->drain();
  const CacheStats st = s->cache()->stats();
  ASSERT_GT(st.tier[2].demotions, static_cast<long>(st.tier[2].capacity_blocks))
      << "L3 never had to evict";
  EXPECT_GT(st.tier[2].dropped, 0);
  EXPECT_EQ(s->cache()->tree().count(Tier::kL3), st.tier[2].used_blocks);
  // Every node holds bytes somewhere or leads to one that does; with these
  // short, unshared prompts that bounds the tree by what the tiers hold.
  const std::size_t held =
      st.tier[0].capacity_blocks + st.tier[1].capacity_blocks + st.tier[2].capacity_blocks;
  EXPECT_LE(st.nodes, held);
}

TEST_F(TieredSchedulerTest, SwapPreemptionRecomputesNothingAndMatchesRecompute) {
  const std::vector<std::string> prompts = {"Q: What is the difference between", "A",
                                            "The fortune you seek is in another cookie.", "Love is",
                                            "It is a truth universally acknowledged"};
  std::vector<RequestParams> reqs;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    reqs.push_back(params(prompts[i], 24, i % 2 ? sampled(40 + i) : greedy()));
  long preemptions[2] = {0, 0}, recomputed[2] = {0, 0};
  for (PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    SchedulerConfig c = tiered();
    c.page_size = 8;
    c.max_kv_tokens = 96;
    c.max_batch_size = 4;
    c.token_budget = 8;
    c.preemption = mode;
    c.cache.l2_bytes = 64 * 32768;
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, reqs)) << to_string(mode);
    const int m = mode == PreemptionMode::kSwap ? 0 : 1;
    preemptions[m] = s->stats().preemptions;
    recomputed[m] = s->stats().recomputed_tokens;
    if (mode == PreemptionMode::kSwap) {
      EXPECT_EQ(s->stats().swapped_in, s->stats().swapped_out);
      EXPECT_EQ(s->stats().swapped, 0);
    }
  }
  EXPECT_GT(preemptions[0], 0) << "the budget never forced a swap";
  EXPECT_EQ(recomputed[0], 0);
  EXPECT_GT(preemptions[1], 0);
  EXPECT_GT(recomputed[1], 0);
}

TEST_F(TieredSchedulerTest, RestartServesThePrefixFromL3AndACorruptSlabIsRecomputed) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  {
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 8, greedy())}));
  }  // the scheduler's cache drains its writes when it goes
  const int prompt_tokens = static_cast<int>(kShared.size()) / 16 * 16;
  {
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    std::vector<RequestId> ids;
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 8, greedy())}, &ids));
    EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], prompt_tokens);
    EXPECT_GT(s->cache()->stats().tier[2].promotions, 0);
  }
  // Every byte of the slab replaced: each block read fails its checksum, is
  // a miss, and the request is prefilled instead, with the same tokens.
  {
    const auto slab = dir.path() / "l3" / "slab";
    const int fd = ::open(slab.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const std::vector<char> junk(1 << 20, 0x5a);
    for (off_t off = 0; off < static_cast<off_t>(std::filesystem::file_size(slab));
         off += static_cast<off_t>(junk.size()))
      ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), off), static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  {
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + " three", 8, greedy())}));
    const CacheStats st = s->cache()->stats();
    EXPECT_GT(st.tier[2].checksum_failures, 0);
    EXPECT_EQ(st.tier[2].promotions, 0);
    // Read by layer, the first pass had started on the bad bytes: thrown away.
    EXPECT_EQ(s->stats().discarded_passes, 1);
  }
}

// KV from a forward with another kv_tag (the GPU's, say: its last bits may
// differ) is never served: a restart with another tag on the same L3 finds
// the store written under another fingerprint, says so, starts it empty and
// recomputes, with the same tokens.
TEST_F(TieredSchedulerTest, AnotherForwardsKvTagFindsNoneOfTheL3Blocks) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  auto run_with_tag = [&](std::uint64_t tag, const std::string& suffix,
                          std::vector<std::string>* warnings) {
    ForwardPass forward;
    forward.kv_tag = tag;
    auto s = Scheduler::create(*model_, tokenizer_, c, nullptr, forward);
    EXPECT_TRUE(s.has_value()) << s.error();
    std::vector<RequestId> ids;
    EXPECT_TRUE(run_and_compare(**s, {params(kShared + suffix, 8, greedy())}, &ids));
    if (warnings) *warnings = (*s)->cache()->warnings();
    return ids.empty() ? -1 : (*s)->find(ids[0])->cached_tokens()[2];
  };
  EXPECT_EQ(run_with_tag(0, " one", nullptr), 0);
  EXPECT_EQ(run_with_tag(0, " two", nullptr), static_cast<int>(kShared.size()) / 16 * 16)
      << "the same tag should find the prefix on L3";
  std::vector<std::string> warnings;
  EXPECT_EQ(run_with_tag(0x1234, " three", &warnings), 0) << "served KV written under another tag";
  EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return contains(w, "format_tag");
  })) << "no warning that the store was written under another fingerprint";
}

// With write_back nothing reaches L3 while L1 has room; a clean shutdown
// persists every cached block, so a restart still finds the prefix.
TEST_F(TieredSchedulerTest, CleanShutdownPersistsWriteBackBlocksForARestart) {
  test_util::TempDir dir;
  const SchedulerConfig c = tiered(dir.path() / "l3");
  ASSERT_EQ(c.cache.write_policy, WritePolicy::kWriteBack);
  {
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 8, greedy())}));
    EXPECT_EQ(s->cache()->stats().tier[2].demotions, 0) << "L1 had room: nothing went down yet";
  }
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 8, greedy())}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], static_cast<int>(kShared.size()) / 16 * 16);
}

TEST_F(TieredSchedulerTest, UnusableL3DegradesToL1AndL2) {
  test_util::TempDir dir;
  const auto file = dir.write("not-a-directory", "x");
  auto s = make_scheduler(tiered(file / "l3"));
  ASSERT_NE(s, nullptr);
  ASSERT_FALSE(s->cache()->warnings().empty());
  EXPECT_TRUE(contains(s->cache()->warnings().front(), "L3 disabled"));
  EXPECT_FALSE(s->cache()->stats().tier[2].available);
  ASSERT_TRUE(
      run_and_compare(*s, {params(kShared, 8, greedy()), params(kShared + "!", 8, greedy())}));
}

// L3 failing under a live engine (its slab truncated: reads come back
// short): requests are prefilled instead, with the same tokens, and the
// errors are counted; once the file is whole again the breaker's probe
// succeeds and L3 serves blocks again.
TEST_F(TieredSchedulerTest, L3IoErrorsDegradeToRecomputeAndL3Recovers) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  c.cache.l3_backoff = std::chrono::milliseconds(5);
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  KvCache& cache = *s->cache();
  auto only_on_l3 = [&] {
    cache.drain();
    cache.flush(Tier::kL1);
    cache.flush(Tier::kL2);
  };
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
  only_on_l3();
  const auto slab = dir.path() / "l3" / "slab";
  const auto size = std::filesystem::file_size(slab);
  std::filesystem::resize_file(slab, 0);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 4, greedy())}, &ids));
  EXPECT_GT(cache.stats().tier[2].io_errors, 0);
  EXPECT_EQ(cache.stats().tier[2].promotions, 0);

  std::filesystem::resize_file(slab, size);
  // New blocks, written through once the breaker lets a probe by.
  const std::string other = "It is a truth universally acknowledged, that a single man ";
  for (int attempt = 0; attempt < 200 && !cache.stats().tier[2].available; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(run_and_compare(*s, {params(other + std::to_string(attempt), 1, greedy())}));
    cache.drain();
  }
  ASSERT_TRUE(run_and_compare(*s, {params(other + "again", 1, greedy())}));
  only_on_l3();
  ASSERT_TRUE(cache.stats().tier[2].available);
  ASSERT_TRUE(run_and_compare(*s, {params(other + "and again", 4, greedy())}));
  EXPECT_GT(cache.stats().tier[2].promotions, 0) << "L3 did not come back";
}

// A pinned prefix may leave L1 for L2 but survives flushing L2; unpinned,
// the same flush drops it. The tree summary follows.
TEST_F(TieredSchedulerTest, PinnedPrefixStaysInL2ThroughFlushes) {
  auto s = make_scheduler(tiered());
  ASSERT_NE(s, nullptr);
  const RequestParams p = params(kShared, 2, greedy());
  ASSERT_TRUE(run_and_compare(*s, {p}));
  KvCache& cache = *s->cache();
  const auto root = cache.root("");
  const int blocks = static_cast<int>(p.prompt.size()) / 16;
  EXPECT_EQ(cache.pin(root, p.prompt, +1), blocks);
  EXPECT_EQ(cache.summarize().pinned, static_cast<std::size_t>(blocks));
  EXPECT_EQ(cache.flush(Tier::kL1), 0) << "pinned blocks are not flushed from L1";
  s->cache()->make_free_l1(s->max_blocks());  // pressure: pinned blocks go down to L2
  EXPECT_EQ(cache.lookup(root, p.prompt, 100).blocks[1], blocks);
  EXPECT_EQ(cache.flush(Tier::kL2), 0);
  EXPECT_EQ(cache.lookup(root, p.prompt, 100).total_blocks(), blocks);
  EXPECT_EQ(cache.pin(root, p.prompt, -1), blocks);
  EXPECT_EQ(cache.flush(Tier::kL2), blocks);
  EXPECT_EQ(cache.lookup(root, p.prompt, 100).total_blocks(), 0);
  const TreeSummary t = cache.summarize();
  EXPECT_EQ(t.pinned, 0u);
  ASSERT_TRUE(s->check_invariants());
}

// Start-up calibration yields positive costs; when L3 is made to look slow
// the cached prefix is recomputed instead of loaded, with the same tokens.
TEST_F(TieredSchedulerTest, LoadOrRecomputeFollowsTheMeasuredCosts) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  s->calibrate_tier_costs();
  const TierCosts measured = s->cache()->stats().costs;
  ASSERT_FALSE(measured.prefill.empty());
  EXPECT_GT(measured.pass_seconds(16), 0);
  EXPECT_GT(measured.load[Tier::kL2].per_block_s, 0);
  EXPECT_GT(measured.load[Tier::kL3].latency_s + measured.load[Tier::kL3].per_block_s, 0);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
  s->cache()->drain();
  s->cache()->flush(Tier::kL1);
  s->cache()->flush(Tier::kL2);
  TierCosts slow = measured;
  slow.load[Tier::kL3].latency_s = 10;  // ten seconds a read: never worth it
  s->cache()->cost_model().pin(slow);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 4, greedy())}, &ids));
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.skipped_loads, 0);
  EXPECT_EQ(st.tier[2].promotions, 0);
  // Recomputed, so not reported as served from L3.
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{0, 0, 0}}));
}

// On an idle daemon no step runs write-back: `cache.flush l1` then
// `cache.flush l2` once dropped the blocks that had just come down to L2,
// though L3 had room for them. A flush moves what the next tier can keep.
TEST_F(TieredSchedulerTest, FlushingAnIdleWriteBackCacheKeepsWhatL3CanHold) {
  test_util::TempDir dir;
  auto s = make_scheduler(tiered(dir.path() / "l3"));  // write_back
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " one", 4, greedy())}));
  const std::size_t cached = s->cache()->tree().count(Tier::kL1);
  ASSERT_GT(cached, 0u);
  ASSERT_EQ(s->cache()->tree().count(Tier::kL3), 0u) << "nothing written back yet";
  EXPECT_EQ(s->cache()->flush(Tier::kL1), static_cast<int>(cached));
  EXPECT_EQ(s->cache()->flush(Tier::kL2), static_cast<int>(cached));
  EXPECT_EQ(s->cache()->tree().count(Tier::kL3), cached);
  EXPECT_EQ(s->cache()->stats().tier[1].dropped, 0);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 4, greedy())}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], static_cast<int>(kShared.size()) / 16 * 16);
}

// A start-up on a machine busy elsewhere measured prefill at 50 ms a token,
// and that figure once ruled every load-or-recompute decision for the
// daemon's life: now the real passes outvote it.
TEST_F(TieredSchedulerTest, ABadStartUpPrefillFigureIsOutvotedByTheRealPasses) {
  auto s = make_scheduler(tiered());
  ASSERT_NE(s, nullptr);
  CostModel& costs = s->cache()->cost_model();
  // Five bad calibration passes of 32 rows: 1.6 s each.
  for (int i = 0; i < 5; ++i) costs.add_prefill(1.6, 32);
  ASSERT_DOUBLE_EQ(s->cache()->stats().costs.pass_seconds(32), 1.6);
  // One at a time, each prompt its own: passes of 32 prefill tokens.
  for (const char* stem : {"Alpha: ", "Bravo: ", "Charlie: ", "Delta: "})
    ASSERT_TRUE(run_and_compare(*s, {params(stem + kShared, 2, greedy())}));
  const TierCosts after = s->cache()->stats().costs;
  // More real samples than bad ones: the median is a real one, whatever
  // this machine's speed (short of 50 ms a token).
  EXPECT_GT(after.prefill_samples(), 10);
  EXPECT_LT(after.pass_seconds(32), 1.6) << "still ruled by the start-up figure";
  EXPECT_GT(after.pass_seconds(32), 0);
}

// Split by the staged figures, the front of a prefix that lives in L3 is
// recomputed while the rest loads (by layer, or in whole blocks): the
// tokens are those of a solo run, and every block, recomputed or loaded,
// holds the very bytes it was first computed with. On a fast disk the
// loads are in before the front is computed; on a throttled one
// (bench/slow_disk.h: a loop device read at five blocks a second, root
// only) they are still coming, and the request waits for them.
struct SplitCase {
  bool by_layer, slow;
};

class TieredSplitTest : public TieredSchedulerTest,
                        public ::testing::WithParamInterface<SplitCase> {
 protected:
  // Where L3 goes: in the test's temp dir, or on a throttled disk made
  // there (empty, and why_not_ says why, where none can be).
  std::filesystem::path l3_dir() {
    if (!GetParam().slow) return dir_.path() / "l3";
    const std::size_t block = model_->kv_layout(16).block_bytes();
    auto d = bench::SlowDisk::create(dir_.path() / "slow", std::size_t{64} << 20, block * 5);
    if (!d) {
      why_not_ = d.error();
      return {};
    }
    if (auto added = (*d)->add(); !added) {
      why_not_ = added.error();
      return {};
    }
    disk_ = std::move(*d);
    return disk_->path() / "l3";
  }
  // The disk is unmounted before its folder goes: members go in reverse.
  test_util::TempDir dir_;
  std::unique_ptr<bench::SlowDisk> disk_;
  std::string why_not_;
};

TEST_P(TieredSplitTest, AFrontRecomputedWhileTheRestLoadsHoldsTheStoredBytes) {
  const std::filesystem::path l3 = l3_dir();
  if (l3.empty()) GTEST_SKIP() << "no throttled loop device here: " << why_not_;
  SchedulerConfig c = tiered(l3);
  c.cache.write_policy = WritePolicy::kWriteThrough;
  c.cache.load_by_layer = GetParam().by_layer;
  const KvLayout layout = model_->kv_layout(16);
  const Scheduler::L1Shape shape = Scheduler::l1_shape(layout, c);
  tiers::BlockPool pool(shape.block_bytes, shape.blocks, tiers::Memory::kPageAligned);
  auto made = Scheduler::create(*model_, tokenizer_, c, &pool);
  ASSERT_TRUE(made.has_value()) << made.error();
  Scheduler& s = **made;
  ASSERT_TRUE(run_and_compare(s, {params(kShared + " one", 4, greedy())}));

  const RequestParams next = params(kShared + " two", 8, greedy());
  const int blocks = (static_cast<int>(next.prompt.size()) - 1) / 16;
  // The L1 block of each of next's prompt blocks, found by its key.
  auto l1_bytes = [&](int b) {
    return test_util::l1_block_bytes(s, pool, layout.block_bytes(), next.prompt, b);
  };
  std::vector<std::vector<std::byte>> computed;
  for (int b = 0; b < blocks; ++b) {
    const auto bytes = l1_bytes(b);
    ASSERT_FALSE(bytes.empty()) << "block " << b;
    computed.emplace_back(bytes.begin(), bytes.end());
  }
  s.cache()->drain();
  s.cache()->flush(Tier::kL1);
  s.cache()->flush(Tier::kL2);  // the prefix in L3 alone
  s.cache()->cost_model().pin(close_costs());
  const RunPlan plan = s.cache()->cost_model().plan(
      {.blocks = blocks,
       .reads = blocks,
       .splittable = blocks,
       .suffix_tokens = static_cast<int>(next.prompt.size()) - blocks * 16},
      16, {.chunk = c.token_budget});
  ASSERT_GT(plan.recompute, 0);
  ASSERT_LT(plan.recompute, blocks) << "the staged figures split the run";

  const CacheStats before = s.cache()->stats();
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(s, {next}, &ids));
  const CacheStats after = s.cache()->stats();
  EXPECT_EQ(after.skipped_loads - before.skipped_loads, plan.recompute);
  EXPECT_EQ(after.tier[2].promotions - before.tier[2].promotions, blocks - plan.recompute);
  EXPECT_EQ(s.find(ids[0])->cached_tokens(), (TierCounts{{0, 0, (blocks - plan.recompute) * 16}}));
  EXPECT_EQ(s.stats().discarded_passes, 0);
  for (int b = 0; b < blocks; ++b) {
    const auto bytes = l1_bytes(b);
    ASSERT_EQ(bytes.size(), computed[b].size()) << "block " << b << " is not in L1";
    EXPECT_EQ(std::memcmp(bytes.data(), computed[b].data(), bytes.size()), 0)
        << "block " << b << (b < plan.recompute ? " (recomputed)" : " (loaded)");
  }
}

// A block of the loaded part fails its checksum while the front is
// recomputed: what was computed on it is thrown away, the request finds
// its front in L1 and recomputes from the damaged block, and its tokens
// are a solo run's: never a wrong token, never a failed request.
TEST_P(TieredSplitTest, ADamagedBlockAfterTheFrontFallsBackToRecomputing) {
  const std::filesystem::path l3 = l3_dir();
  if (l3.empty()) GTEST_SKIP() << "no throttled loop device here: " << why_not_;
  auto s = with_a_damaged_l3_block(l3, 3, GetParam().by_layer);
  ASSERT_NE(s, nullptr);
  s->cache()->cost_model().pin(close_costs());
  const CacheStats before = s->cache()->stats();
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {params(kShared + " two", 8, greedy())}, &ids));
  const CacheStats after = s->cache()->stats();
  EXPECT_EQ(after.tier[2].checksum_failures, 1);
  EXPECT_EQ(s->stats().discarded_passes, 1);
  // Five blocks, split two and three: blocks 0 and 1 recomputed, never
  // read; 2 and 4 read whole; 3 failed. (Unsplit, 0 and 1 are read too.)
  EXPECT_EQ(after.tier[2].promotions - before.tier[2].promotions, 2);
  // Looking again, it found the front it had computed in L1 (and block 2,
  // landed meanwhile, counted as the L3 hit it is).
  EXPECT_EQ(after.tier[0].hits - before.tier[0].hits, 2);
}

INSTANTIATE_TEST_SUITE_P(Loads, TieredSplitTest,
                         ::testing::Values(SplitCase{true, false}, SplitCase{false, false},
                                           SplitCase{true, true}, SplitCase{false, true}),
                         [](const auto& info) {
                           return std::string(info.param.by_layer ? "ByLayer" : "WholeBlocks") +
                                  (info.param.slow ? "FromASlowDisk" : "");
                         });

}  // namespace
}  // namespace kvtier
