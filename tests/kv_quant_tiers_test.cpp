// Quantised lower tiers (l2_format / l3_format = int8, engine/cache/kv_cache.h):
// capacity, the round trip through an int8 L2 and an int8 L3 (within
// kernels/kv_quant.h's error bound; exact stays bit-identical), a restart on
// an int8 store, an exact store reopened as int8, the refused combination,
// the scheduler under pressure with int8 tiers, and the daemon's flags. All
// with real parts: the L3 store lives in a temporary directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon_test_util.h"
#include "engine/cache/kv_cache.h"
#include "engine/scheduling/scheduler.h"
#include "kernels/kv_quant.h"
#include "scheduler_test_util.h"
#include "stand_in_device.h"
#include "test_util.h"
#include "tiers/align.h"

namespace kvtier {
namespace {

using nlohmann::json;
using test_util::contains;
using test_util::make_scheduler;
using test_util::request_params;

constexpr KvLayout kLayout{4, 4, 32, 16, {}};  // the bundled model's: 64 KiB blocks
constexpr std::uint64_t kFingerprint = 0x6b767469657221ULL;

CacheConfig config(KvFormat l2, KvFormat l3, const std::filesystem::path& l3_path = {}) {
  CacheConfig c;
  c.l2_bytes = 16 * 65536;
  c.l2_format = l2;
  c.l3_format = l3;
  if (!l3_path.empty()) {
    c.l3_path = l3_path.string();
    c.l3_bytes = 64 * 65536;
  }
  return c;
}

std::unique_ptr<KvCache> make_cache(tiers::BlockPool& l1, const CacheConfig& c,
                                    const KvLayout& layout = kLayout,
                                    const DeviceKvCodec& codec = {}) {
  auto cache = KvCache::create(layout, kFingerprint, l1, c, codec);
  EXPECT_TRUE(cache.has_value()) << cache.error();
  return cache ? std::move(*cache) : nullptr;
}

std::vector<int> block_tokens(int seed) {
  std::vector<int> t(static_cast<std::size_t>(kLayout.page_size));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int>((seed * 7 + i * 3) % 90);
  return t;
}

// KV-like floats: runs of very different magnitudes (each gets its own scale).
std::vector<float> random_kv(unsigned seed) {
  const kernels::KvShape s = kLayout.shape();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(s.floats_per_block()));
  for (long r = 0; r < s.runs_per_block(); ++r) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(r % 5) * 2 - 4);
    for (long i = 0; i < s.floats_per_run(); ++i)
      x[static_cast<std::size_t>(r * s.floats_per_run() + i)] = magnitude * normal(rng);
  }
  return x;
}

// Puts kv in a fresh L1 block and caches it under tokens (the cache keeps
// the only reference).
void cache_block(KvCache& cache, tiers::BlockPool& l1, const std::vector<int>& tokens,
                 const std::vector<float>& kv) {
  const int block = l1.allocate().value();
  std::memcpy(l1.data(block), kv.data(), kv.size() * sizeof(float));
  const int blocks[] = {block};
  cache.insert(cache.root(""), tokens, blocks);
  l1.release(block);
}

// Brings the cached block of tokens up into L1 (through whatever tier has
// it) and returns its floats; empty if it never arrives.
std::vector<float> fetch(KvCache& cache, tiers::BlockPool& l1, const std::vector<int>& tokens) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    auto lease = cache.acquire_prefix(cache.root(""), tokens, 1, 1);
    if (lease) {
      if (lease->blocks().size() != 1) return {};
      const float* data = reinterpret_cast<const float*>(l1.data(lease->blocks()[0]));
      return std::vector<float>(data, data + kLayout.shape().floats_per_block());
    }
    cache.wait(std::chrono::milliseconds(10));
    cache.poll();
  }
  return {};
}

// kv_quant's bound: every element within half its run's scale (absmax /
// 127), up to float rounding.
::testing::AssertionResult within_int8_bound(const std::vector<float>& want,
                                             const std::vector<float>& got) {
  const kernels::KvShape s = kLayout.shape();
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "no block came back";
  for (long r = 0; r < s.runs_per_block(); ++r) {
    const auto run = want.begin() + r * s.floats_per_run();
    float absmax = 0.0f;
    for (auto it = run; it != run + s.floats_per_run(); ++it)
      absmax = std::max(absmax, std::fabs(*it));
    const double bound = 0.5 * kernels::kv_quant_scale(absmax) * (1.0 + 0x1p-16);
    for (long i = 0; i < s.floats_per_run(); ++i) {
      const std::size_t k = static_cast<std::size_t>(r * s.floats_per_run() + i);
      if (!(std::fabs(static_cast<double>(want[k]) - got[k]) <= bound))
        return ::testing::AssertionFailure()
               << "run " << r << " element " << i << ": " << want[k] << " came back as " << got[k]
               << " (bound " << bound << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

tiers::BlockPool l1_pool(int blocks = 32) {
  return tiers::BlockPool(tiers::round_up(kLayout.block_bytes(), 4096), blocks,
                          tiers::Memory::kPageAligned);
}

// An L1 in the stand-in for device memory (stand_in_device.h), with its
// link: L2 lies in the host memory the link offers.
tiers::BlockPool copy_only_pool(test_util::StandInDevice& device, int blocks = 32) {
  const std::size_t block = tiers::round_up(kLayout.block_bytes(), 4096);
  return tiers::BlockPool(block, blocks,
                          device.region(block * static_cast<std::size_t>(blocks), true));
}

// A stand-in for the device's int8 codec (engine/cuda/cuda_kv_codec.h, run
// where a GPU is): the host codec, reaching L1 through the pool's copy. It
// counts its calls, and those whose L1 end was not in L1.
struct StandInCodec {
  std::atomic<long> calls = 0;
  std::atomic<long> outside_l1 = 0;
  DeviceKvCodec codec(const tiers::BlockPool& l1) {
    const kernels::KvShape shape = kLayout.shape();
    const std::size_t n = kLayout.block_bytes();
    DeviceKvCodec c;
    c.encode = [this, &l1, shape, n](std::byte* host_dst, const std::byte* l1_src) {
      ++calls;
      outside_l1 += !l1.contains(l1_src);
      std::vector<float> block(n / sizeof(float));
      l1.copy(reinterpret_cast<std::byte*>(block.data()), l1_src, n);
      kernels::quantize_block(block.data(), shape, host_dst);
    };
    c.decode = [this, &l1, shape, n](std::byte* l1_dst, const std::byte* host_src) {
      ++calls;
      outside_l1 += !l1.contains(l1_dst);
      std::vector<float> block(n / sizeof(float));
      kernels::dequantize_block(host_src, shape, block.data());
      l1.copy(l1_dst, reinterpret_cast<const std::byte*>(block.data()), n);
    };
    return c;
  }
};

TEST(KvQuantTiersTest, FormatsParseAndPrint) {
  EXPECT_EQ(parse_kv_format("exact").value(), KvFormat::kExact);
  EXPECT_EQ(parse_kv_format("int8").value(), KvFormat::kInt8);
  EXPECT_EQ(to_string(KvFormat::kInt8), "int8");
  EXPECT_EQ(to_string(KvFormat::kExact), "exact");
  const auto bad = parse_kv_format("int4");
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(contains(bad.error(), "expected exact or int8")) << bad.error();
}

// For the same l2_bytes an int8 L2 holds kv_quant_bytes-sized slots (rounded
// to a page): about 4x the blocks for GPT-2 124M, 3.2x for the bundled
// model (16 KiB + 128 bytes of scales, padded to 20 KiB).
TEST(KvQuantTiersTest, Int8L2HoldsAboutFourTimesTheBlocksOfExact) {
  const KvLayout gpt2{12, 12, 64, 16, {}};
  for (const KvLayout& layout : {kLayout, gpt2}) {
    tiers::BlockPool l1(tiers::round_up(layout.block_bytes(), 4096), 2);
    CacheConfig c = config(KvFormat::kExact, KvFormat::kExact);
    c.l2_bytes = 32 * layout.block_bytes();
    const auto exact = make_cache(l1, c, layout);
    c.l2_format = KvFormat::kInt8;
    const auto int8 = make_cache(l1, c, layout);
    ASSERT_TRUE(exact && int8);
    const TierStats e = exact->stats().tier[1], q = int8->stats().tier[1];
    const std::size_t encoded = kernels::kv_quant_bytes(layout.shape());
    EXPECT_EQ(e.capacity_blocks, 32u);
    EXPECT_EQ(q.capacity_blocks, c.l2_bytes / tiers::round_up(encoded, 4096));
    EXPECT_EQ(e.block_bytes, layout.block_bytes());
    EXPECT_EQ(q.block_bytes, encoded);
    EXPECT_EQ(q.format, KvFormat::kInt8);
    EXPECT_EQ(int8->stats().tier[0].format, KvFormat::kExact);
    const double ratio = static_cast<double>(q.capacity_blocks) / e.capacity_blocks;
    EXPECT_GE(ratio, layout.n_layer == 12 ? 3.9 : 3.1) << layout.n_layer << " layers";
  }
}

// Demoted to L2 (flush L1) and promoted back by the copy worker: exact is
// the same bytes, int8 within the bound and, for these values, not the same.
TEST(KvQuantTiersTest, L2RoundTripIsExactOrWithinTheInt8Bound) {
  const std::vector<float> kv = random_kv(1);
  for (KvFormat format : {KvFormat::kExact, KvFormat::kInt8}) {
    auto l1 = l1_pool();
    const auto cache = make_cache(l1, config(format, format));
    ASSERT_NE(cache, nullptr);
    cache_block(*cache, l1, block_tokens(1), kv);
    EXPECT_EQ(cache->flush(Tier::kL1), 1);
    ASSERT_EQ(cache->lookup(cache->root(""), block_tokens(1), 1).blocks[1], 1);
    const std::vector<float> back = fetch(*cache, l1, block_tokens(1));
    ASSERT_EQ(back.size(), kv.size()) << to_string(format);
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[1].demotions, 1);
    EXPECT_EQ(st.tier[1].promotions, 1);
    EXPECT_EQ(st.tier[1].bytes_in, static_cast<long>(st.tier[1].block_bytes));
    if (format == KvFormat::kExact) {
      EXPECT_EQ(std::memcmp(back.data(), kv.data(), kv.size() * sizeof(float)), 0);
    } else {
      EXPECT_TRUE(within_int8_bound(kv, back));
      EXPECT_NE(back, kv) << "int8 is lossy for these values";
    }
    ASSERT_TRUE(cache->check_invariants());
  }
}

// A swapped request's partial block through an int8 L2 slot: within the bound.
TEST(KvQuantTiersTest, StashedBlockComesBackWithinTheInt8Bound) {
  const std::vector<float> kv = random_kv(2);
  auto l1 = l1_pool();
  const auto cache = make_cache(l1, config(KvFormat::kInt8, KvFormat::kInt8));
  ASSERT_NE(cache, nullptr);
  const int block = l1.allocate().value();
  std::memcpy(l1.data(block), kv.data(), kv.size() * sizeof(float));
  const int table[] = {block};
  auto ticket = cache->swap_out_private(table, kLayout.page_size);
  l1.release(block);
  ASSERT_TRUE(ticket.has_value());
  EXPECT_EQ(ticket->stashed(), 1);
  PrefixLease none;
  auto back = cache->resume(none, &*ticket, kLayout.page_size);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->block_ids().size(), 1u);
  EXPECT_EQ(ticket->stashed(), 0);
  const int back_block = back->block_ids()[0];
  const float* data = reinterpret_cast<const float*>(l1.data(back_block));
  EXPECT_TRUE(within_int8_bound(kv, std::vector<float>(data, data + kv.size())));
  back->release(l1);
}

// Through an int8 L3 and a restart: written from L1 (exact L2: encoded into
// staging), from an exact L2 slot (staging again) or from an int8 L2 slot
// (as it is), then read after a restart into staging and decoded.
TEST(KvQuantTiersTest, Int8L3ServesBlocksAfterARestartWithinTheBound) {
  struct Case {
    KvFormat l2;
    bool flush_l1_first;  // the write then comes from the L2 slot
  };
  for (const Case& k :
       {Case{KvFormat::kExact, false}, Case{KvFormat::kExact, true}, Case{KvFormat::kInt8, true}}) {
    SCOPED_TRACE(std::string(to_string(k.l2)) + (k.flush_l1_first ? " from L2" : " from L1"));
    test_util::TempDir dir;
    const CacheConfig c = config(k.l2, KvFormat::kInt8, dir.path() / "l3");
    const std::vector<float> kv = random_kv(3);
    {
      auto l1 = l1_pool();
      const auto cache = make_cache(l1, c);
      ASSERT_NE(cache, nullptr);
      ASSERT_TRUE(cache->stats().tier[2].available);
      cache_block(*cache, l1, block_tokens(3), kv);
      if (k.flush_l1_first) cache->flush(Tier::kL1);
      EXPECT_EQ(cache->persist(), 1);
      EXPECT_EQ(cache->stats().tier[2].bytes_in,
                static_cast<long>(kernels::kv_quant_bytes(kLayout.shape())));
    }
    auto l1 = l1_pool();
    const auto cache = make_cache(l1, c);
    ASSERT_NE(cache, nullptr);
    for (const std::string& w : cache->warnings()) EXPECT_FALSE(contains(w, "discarded")) << w;
    ASSERT_EQ(cache->lookup(cache->root(""), block_tokens(3), 1).blocks[2], 1);
    const std::vector<float> back = fetch(*cache, l1, block_tokens(3));
    EXPECT_TRUE(within_int8_bound(kv, back));
    const CacheStats st = cache->stats();
    EXPECT_EQ(st.tier[2].promotions, 1);
    EXPECT_EQ(st.tier[2].checksum_failures, 0);
    ASSERT_TRUE(cache->check_invariants());
  }
}

// With an L1 the host may not address (device memory, with the GPU), a
// block passes through a host buffer on its way to and from the int8 codec,
// or through the device's codec when it offers one. What comes back is what
// a host L1 gets, byte for byte: through an int8 L2, through an int8 L3
// after a restart (read into staging, decoded, copied up), and through an
// int8 L3 written from an exact L2 (which the host encodes: the slot is host
// memory, not the device's).
TEST(KvQuantTiersTest, AnL1OnlyItsCopyReachesGetsTheBytesOfAHostL1) {
  const std::vector<float> kv = random_kv(4);
  test_util::StandInDevice device;
  StandInCodec codec;
  enum class L1 { kHost, kCopyOnly, kWithCodec };
  enum class Path { kL2, kL3, kExactL2ToL3 };
  // The block cached, demoted (and persisted, then the cache restarted),
  // and fetched back into an L1 of the kind asked for.
  auto round_trip = [&](L1 kind, Path path) -> std::vector<float> {
    test_util::TempDir dir;
    const CacheConfig c = path == Path::kL2
                              ? config(KvFormat::kInt8, KvFormat::kInt8)
                              : config(path == Path::kL3 ? KvFormat::kInt8 : KvFormat::kExact,
                                       KvFormat::kInt8, dir.path() / "l3");
    auto open = [&](tiers::BlockPool& l1) {
      return make_cache(l1, c, kLayout, kind == L1::kWithCodec ? codec.codec(l1) : DeviceKvCodec{});
    };
    {
      tiers::BlockPool l1 = kind == L1::kHost ? l1_pool() : copy_only_pool(device);
      const auto cache = open(l1);
      if (cache == nullptr) return {};
      cache_block(*cache, l1, block_tokens(4), kv);
      cache->flush(Tier::kL1);
      if (path == Path::kL2) {
        std::vector<float> back = fetch(*cache, l1, block_tokens(4));
        EXPECT_EQ(cache->stats().tier[1].promotions, 1);
        EXPECT_TRUE(cache->check_invariants());
        return back;
      }
      EXPECT_EQ(cache->persist(), 1);
    }
    tiers::BlockPool l1 = kind == L1::kHost ? l1_pool() : copy_only_pool(device);
    const auto cache = open(l1);
    if (cache == nullptr) return {};
    EXPECT_EQ(cache->lookup(cache->root(""), block_tokens(4), 1).blocks[2], 1);
    std::vector<float> back = fetch(*cache, l1, block_tokens(4));
    EXPECT_EQ(cache->stats().tier[2].promotions, 1);
    EXPECT_TRUE(cache->check_invariants());
    return back;
  };
  for (const Path path : {Path::kL2, Path::kL3, Path::kExactL2ToL3}) {
    SCOPED_TRACE(path == Path::kL2   ? "through L2"
                 : path == Path::kL3 ? "through L3 and a restart"
                                     : "through an exact L2, an int8 L3 and a restart");
    device.copies = 0;
    const std::vector<float> host = round_trip(L1::kHost, path);
    EXPECT_EQ(device.copies.load(), 0);
    EXPECT_TRUE(within_int8_bound(kv, host));
    for (const L1 kind : {L1::kCopyOnly, L1::kWithCodec}) {
      SCOPED_TRACE(kind == L1::kCopyOnly ? "host codec" : "device codec");
      device.copies = 0;
      codec.calls = 0;
      const std::vector<float> got = round_trip(kind, path);
      EXPECT_GT(device.copies.load(), 0) << "nothing went through the pool's copy";
      // An exact L2's copies from L1 may take the queue (a flush queues them);
      // an int8 move never does.
      if (path != Path::kExactL2ToL3) {
        EXPECT_EQ(device.queued.load(), 0) << "int8 moves are the codec's, not the queue's";
      }
      EXPECT_EQ(codec.calls.load() > 0, kind == L1::kWithCodec) << "codec calls " << codec.calls;
      EXPECT_EQ(codec.outside_l1.load(), 0) << "the device codec was given host memory as L1";
      ASSERT_EQ(host.size(), got.size());
      EXPECT_EQ(std::memcmp(host.data(), got.data(), host.size() * sizeof(float)), 0);
    }
  }
}

// The format is part of the store's tag: an exact store opened as int8 (or
// the other way) starts empty, says so, and never serves the other's bytes.
TEST(KvQuantTiersTest, AStoreWrittenInOneFormatStartsEmptyInTheOther) {
  test_util::TempDir dir;
  const std::vector<float> kv = random_kv(4);
  const std::vector<std::pair<KvFormat, KvFormat>> order = {{KvFormat::kExact, KvFormat::kInt8},
                                                            {KvFormat::kInt8, KvFormat::kExact}};
  for (const auto& [written, reopened] : order) {
    SCOPED_TRACE(std::string(to_string(written)) + " reopened as " +
                 std::string(to_string(reopened)));
    {
      auto l1 = l1_pool();
      const auto cache = make_cache(
          l1, config(KvFormat::kExact, written, dir.path() / std::string(to_string(written))));
      ASSERT_NE(cache, nullptr);
      cache_block(*cache, l1, block_tokens(4), kv);
      EXPECT_EQ(cache->persist(), 1);
    }
    auto l1 = l1_pool();
    const auto cache = make_cache(
        l1, config(KvFormat::kExact, reopened, dir.path() / std::string(to_string(written))));
    ASSERT_NE(cache, nullptr);
    ASSERT_FALSE(cache->warnings().empty());
    EXPECT_TRUE(contains(cache->warnings().front(), "discarded")) << cache->warnings().front();
    EXPECT_EQ(cache->stats().tier[2].used_blocks, 0u);
    EXPECT_EQ(cache->lookup(cache->root(""), block_tokens(4), 1).total_blocks(), 0);
  }
}

TEST(KvQuantTiersTest, Int8L2OverAnExactL3IsRefused) {
  test_util::TempDir dir;
  auto l1 = l1_pool();
  const CacheConfig c = config(KvFormat::kInt8, KvFormat::kExact, dir.path() / "l3");
  const auto refused = KvCache::create(kLayout, kFingerprint, l1, c);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "l2_format int8 over l3_format exact")) << refused.error();
  SchedulerConfig s;
  s.prefix_cache = true;
  s.cache = c;
  ASSERT_FALSE(s.validate().has_value());
  EXPECT_TRUE(contains(s.validate().error(), "use l3_format int8")) << s.validate().error();
  // Accepted: the other three, and an int8 L2 with no L3 at all.
  EXPECT_TRUE(make_cache(l1, config(KvFormat::kInt8, KvFormat::kExact)));
  EXPECT_TRUE(make_cache(l1, config(KvFormat::kExact, KvFormat::kInt8, dir.path() / "a")));
  EXPECT_TRUE(make_cache(l1, config(KvFormat::kInt8, KvFormat::kInt8, dir.path() / "b")));
}

// The scheduler on the bundled model with int8 L2 and L3.
class QuantSchedulerTest : public ::testing::Test {
 protected:
  // Runs every request to completion with check_invariants() after each step.
  // Tokens are not compared with a solo run: int8 tiers are lossy.
  static ::testing::AssertionResult run(Scheduler& s, const std::vector<RequestParams>& reqs,
                                        std::vector<RequestId>* ids = nullptr) {
    std::vector<RequestId> submitted;
    if (auto ran = test_util::submit_and_run(s, reqs, submitted); !ran) return ran;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (static_cast<int>(s.find(submitted[i])->generated().size()) != reqs[i].max_tokens)
        return ::testing::AssertionFailure() << "request " << i << " stopped early";
    }
    if (ids) *ids = submitted;
    return ::testing::AssertionSuccess();
  }

  static SchedulerConfig int8_tiers(const std::filesystem::path& l3) {
    SchedulerConfig c;
    c.prefix_cache = true;
    c.preemption = PreemptionMode::kSwap;
    c.max_kv_tokens = 4096;
    c.max_batch_size = 4;
    c.token_budget = 32;
    c.cache.l2_bytes = 16 * 65536;
    c.cache.l2_format = KvFormat::kInt8;
    c.cache.l3_format = KvFormat::kInt8;
    c.cache.l3_path = l3.string();
    c.cache.l3_bytes = 256 * 65536;
    return c;
  }
};

const std::string kShared =
    "Q: What is the difference between a duck? A: One of its legs is both the same. "
    "And the other";

// A tiny L1 and L2 under many requests with shared prefixes and swap
// preemption: blocks are encoded into L2, written back to L3 as they are,
// promoted from both, and the pool and cache stay consistent every step.
TEST_F(QuantSchedulerTest, HeavyPressureWithInt8TiersRunsToCompletion) {
  test_util::TempDir dir;
  SchedulerConfig c = int8_tiers(dir.path() / "l3");
  c.max_kv_tokens = 160;  // 10 blocks
  c.token_budget = 16;
  c.cache.l2_bytes = 2 * 65536;  // 6 int8 slots
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  const std::vector<std::string> stems = {"Love is a ", "The fortune you seek ",
                                          "It is a truth universally ", "A bird in the hand "};
  for (int round = 0; round < 3; ++round) {
    std::vector<RequestParams> wave;
    for (std::size_t i = 0; i < stems.size(); ++i)
      wave.push_back(request_params(stems[i] + kShared.substr(0, 40 + 8 * i), 6 + round * 4));
    ASSERT_TRUE(run(*s, wave)) << "round " << round;
  }
  s->cache()->drain();
  ASSERT_TRUE(s->check_invariants());
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[1].demotions, 0);
  EXPECT_GT(st.tier[1].promotions, 0);
  EXPECT_GT(st.tier[2].demotions, 0);
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_EQ(st.tier[2].checksum_failures, 0);
  EXPECT_EQ(st.tier[2].bytes_in, st.tier[2].demotions * static_cast<long>(st.tier[2].block_bytes));
}

// Swap preemption through an int8 L2: the victims' partial blocks are
// stashed encoded and come back decoded; nothing is recomputed.
TEST_F(QuantSchedulerTest, SwapPreemptionThroughAnInt8L2RecomputesNothing) {
  SchedulerConfig c;
  c.prefix_cache = true;
  c.preemption = PreemptionMode::kSwap;
  c.page_size = 8;
  c.max_kv_tokens = 96;
  c.max_batch_size = 4;
  c.token_budget = 8;
  c.cache.l2_bytes = 64 * 32768;
  c.cache.l2_format = KvFormat::kInt8;
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  std::vector<RequestParams> reqs;
  for (const char* prompt :
       {"Q: What is the difference between", "A", "The fortune you seek is in another cookie.",
        "Love is", "It is a truth universally acknowledged"})
    reqs.push_back(request_params(prompt, 24));
  ASSERT_TRUE(run(*s, reqs));
  EXPECT_GT(s->stats().preemptions, 0) << "the budget never forced a swap";
  EXPECT_EQ(s->stats().recomputed_tokens, 0);
  EXPECT_EQ(s->stats().swapped_in, s->stats().swapped_out);
  EXPECT_GT(s->cache()->stats().tier[1].demotions, 0);
}

// A restart on the same int8 l3_path serves the prefix from L3.
TEST_F(QuantSchedulerTest, RestartOnAnInt8StoreServesThePrefixFromL3) {
  test_util::TempDir dir;
  SchedulerConfig c = int8_tiers(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  {
    auto s = make_scheduler(c);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run(*s, {request_params(kShared + " one", 8)}));
  }
  auto s = make_scheduler(c);
  ASSERT_NE(s, nullptr);
  for (const std::string& w : s->cache()->warnings()) EXPECT_FALSE(contains(w, "discarded")) << w;
  std::vector<RequestId> ids;
  ASSERT_TRUE(run(*s, {request_params(kShared + " two", 8)}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], static_cast<int>(kShared.size()) / 16 * 16);
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_EQ(st.tier[2].checksum_failures, 0);
}

// The daemon: flags and config-file keys, read-only in config.get, shown by
// `tiers`; bad values and the refused combination are clear errors.
TEST(KvQuantTiersDaemonTest, FormatsAreRestartOnlySettingsShownByTiers) {
  using namespace daemon_test;
  test_util::TempDir dir;
  Daemon d({"--l2-format", "int8", "--l3-format", "int8", "--l3-path", (dir.path() / "l3").string(),
            "--l3-bytes", "16M"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto c = d.connect();
  const auto config = c->call(request(1, "config.get"));
  ASSERT_TRUE(config && config->contains("result")) << d.log();
  for (const char* name : {"l2_format", "l3_format"}) {
    EXPECT_EQ((*config)["result"][name]["value"], "int8") << name;
    EXPECT_EQ((*config)["result"][name]["runtime"], false) << name;
  }
  const auto tiers = c->call(request(2, "tiers"));
  ASSERT_TRUE(tiers && tiers->contains("result"));
  const json& t = (*tiers)["result"]["tiers"];
  EXPECT_EQ(t["l1"]["format"], "exact");
  EXPECT_EQ(t["l2"]["format"], "int8");
  EXPECT_EQ(t["l3"]["format"], "int8");
  EXPECT_EQ(t["l2"]["block_bytes"], kernels::kv_quant_bytes(kLayout.shape()));
  // What a block costs each tier: its slot, the encoding rounded up to 4 KiB
  // in L2 and L3 (docs/tuning.md: 20,480 bytes for the bundled model).
  const std::size_t slot = (kernels::kv_quant_bytes(kLayout.shape()) + 4095) / 4096 * 4096;
  EXPECT_EQ(t["l1"]["slot_bytes"], kLayout.block_bytes());
  EXPECT_EQ(t["l2"]["slot_bytes"], slot);
  EXPECT_EQ(t["l3"]["slot_bytes"], slot);
  EXPECT_EQ(t["remote"]["slot_bytes"], 0) << "a tier not open";
  auto refused = c->call(request(3, "config.set", {{"l2_format", "exact"}}));
  EXPECT_EQ(error_code(refused), -32602);
  EXPECT_TRUE(
      contains((*refused)["error"]["message"].get<std::string>(), "restart it with --l2-format"));
  const auto generated = c->call(request(4, "generate", generate_params(kShared, 8, 0.0f, 0)));
  ASSERT_TRUE(generated && generated->contains("result"));
  EXPECT_EQ((*generated)["result"]["completion_tokens"], 8);
  shutdown(d);
}

TEST(KvQuantTiersDaemonTest, BadFormatsAreRefusedWithAClearMessage) {
  using namespace daemon_test;
  test_util::TempDir dir;
  const std::vector<std::string> base = {"--socket", (dir.path() / "s.sock").string(), "--model",
                                         kModelDir.string()};
  const std::string l3 = (dir.path() / "l3").string();
  const auto file = dir.write("kvtierd.toml", "l3-format = \"int4\"\n");
  expect_refused(base, {
                           {{"--l2-format", "int4"}, "--l2-format"},
                           {{"--l3-format", "fp8"}, "--l3-format"},
                           {{"--l2-format", "int8", "--l3-path", l3, "--l3-bytes", "16M"},
                            "use l3_format int8"},
                           {{"--config", file.string()}, "l3-format"},
                       });
}

}  // namespace
}  // namespace kvtier
