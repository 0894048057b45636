// The tiered prefix cache with L1 in device memory and the GPU forward
// (engine/cache/kv_cache.h's device-L1 case, engine/cuda/cuda_model.h) on the
// bundled model: heavy pressure through L2 and L3 and back, swap preemption
// and a restart on the same L3. Every request's tokens must equal its solo
// run on the GPU (no cache, no pressure) bit for bit, and check_invariants()
// holds after every step; int8 tiers (lossy) are checked to run through.
// Skipped with the reason without a device.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/scheduling/scheduler.h"
#include "scheduler_test_util.h"
#include "test_util.h"
#include "tests/cuda_test_util.h"

namespace kvtier {
namespace {

using test_util::greedy;
using test_util::request_params;
using test_util::sampled;

const std::string kShared =
    "Q: What is the difference between a duck? A: One of its legs is both the same. "
    "And the other";

// A scheduler over the GPU's device (engine/device.h), whose L1 it uses
// (declared first: the scheduler goes first).
struct GpuScheduler {
  Device device;
  std::unique_ptr<Scheduler> scheduler;
  Scheduler* operator->() const { return scheduler.get(); }
};

class CudaKvCacheTest : public cuda_test_util::CudaDeviceTest {
 protected:
  void SetUp() override {
    cuda_test_util::CudaDeviceTest::SetUp();
    if (IsSkipped()) return;
    model_ = &test_util::bundled_model().model;
    tokenizer_ = test_util::bundled_model().tokenizer.get();
  }

  // With `codec`, int8 tiers encode and decode on the GPU (CudaKvCodec);
  // without, on the host. A codec that cannot be made or fails fails the test.
  GpuScheduler make(const SchedulerConfig& c, bool codec = false) {
    GpuScheduler g;
    DeviceOptions options{.kind = "cuda", .int8_on_device = codec};
    options.on_warning = options.on_error = [](const std::string& why) { ADD_FAILURE() << why; };
    auto device = open_device(*model_, c, options);
    EXPECT_TRUE(device.has_value()) << device.error();
    if (!device) return g;
    g.device = std::move(*device);
    auto s = Scheduler::create(*model_, tokenizer_, c, g.device.l1.get(), g.device.forward);
    EXPECT_TRUE(s.has_value()) << s.error();
    if (s) g.scheduler = std::move(*s);
    return g;
  }

  // The request alone on the GPU: no prefix cache, room for all of it.
  // Not test_util::alone(), which runs generate() on the CPU: the GPU's
  // tokens are held to the GPU's own solo run.
  std::vector<int> alone(const RequestParams& p) {
    SchedulerConfig c;
    c.max_kv_tokens = 2048;
    GpuScheduler g = make(c);
    if (!g.scheduler) return {};
    std::vector<RequestId> ids;
    EXPECT_TRUE(test_util::submit_and_run(*g.scheduler, {p}, ids));
    const Request* r = g->find(ids[0]);
    return std::vector<int>(r->generated().begin(), r->generated().end());
  }

  ::testing::AssertionResult run_and_compare(Scheduler& s, const std::vector<RequestParams>& reqs,
                                             std::vector<RequestId>* ids_out = nullptr) {
    std::vector<RequestId> ids;
    if (auto ran = test_util::submit_and_run(s, reqs, ids); !ran) return ran;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const Request* r = s.find(ids[i]);
      const std::vector<int> got(r->generated().begin(), r->generated().end());
      if (got.empty() || got != alone(reqs[i]))
        return ::testing::AssertionFailure() << "request " << i << " differs from its solo run";
    }
    if (ids_out) *ids_out = ids;
    return ::testing::AssertionSuccess();
  }

  static SchedulerConfig tiered(const std::filesystem::path& l3) {
    SchedulerConfig c;
    c.prefix_cache = true;
    c.max_kv_tokens = 160;  // 10 blocks
    c.max_batch_size = 4;
    c.token_budget = 32;
    c.cache.l2_bytes = 6 * 65536;
    c.cache.l3_path = l3.string();
    c.cache.l3_bytes = 256 * 65536;
    return c;
  }

  Model* model_ = nullptr;
  Tokenizer* tokenizer_ = nullptr;
};

TEST_F(CudaKvCacheTest, HeavyPressureMovesDeviceBlocksThroughL2AndL3WithoutChangingTokens) {
  test_util::TempDir dir;
  GpuScheduler s = make(tiered(dir.path() / "l3"));
  ASSERT_NE(s.scheduler, nullptr);
  EXPECT_FALSE(s.device.l1->host_addressable());
  const std::vector<std::string> stems = {"Love is a ", "The fortune you seek ",
                                          "It is a truth universally ", "A bird in the hand "};
  for (int round = 0; round < 3; ++round) {
    std::vector<RequestParams> part;
    for (std::size_t i = 0; i < stems.size(); ++i)
      part.push_back(request_params(stems[i] + kShared.substr(0, 40 + 8 * i), 6,
                                    round == 1 ? sampled(round * 10 + i) : greedy()));
    ASSERT_TRUE(run_and_compare(*s.scheduler, part)) << "round " << round;
  }
  s->cache()->drain();
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[1].demotions, 0);
  EXPECT_GT(st.tier[2].demotions, 0);
  EXPECT_GT(st.tier[1].promotions, 0);
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_GT(st.recompute_tokens_avoided, 0);
  EXPECT_EQ(st.tier[2].checksum_failures, 0);
}

TEST_F(CudaKvCacheTest, SwapPreemptionRecomputesNothingOnTheGpu) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.l3_path.clear();
  c.page_size = 8;
  c.max_kv_tokens = 96;
  c.token_budget = 8;
  c.cache.l2_bytes = 64 * 32768;
  c.preemption = PreemptionMode::kSwap;
  GpuScheduler s = make(c);
  ASSERT_NE(s.scheduler, nullptr);
  const std::vector<std::string> prompts = {"Q: What is the difference between", "A",
                                            "The fortune you seek is in another cookie.", "Love is",
                                            "It is a truth universally acknowledged"};
  std::vector<RequestParams> reqs;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    reqs.push_back(request_params(prompts[i], 24, i % 2 ? sampled(40 + i) : greedy()));
  ASSERT_TRUE(run_and_compare(*s.scheduler, reqs));
  EXPECT_GT(s->stats().preemptions, 0) << "the budget never forced a swap";
  EXPECT_EQ(s->stats().recomputed_tokens, 0);
  EXPECT_EQ(s->stats().swapped_in, s->stats().swapped_out);
}

TEST_F(CudaKvCacheTest, ARestartServesThePrefixFromL3IntoDeviceMemory) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.max_kv_tokens = 4096;
  c.cache.write_policy = WritePolicy::kWriteThrough;
  {
    GpuScheduler s = make(c);
    ASSERT_NE(s.scheduler, nullptr);
    ASSERT_TRUE(run_and_compare(*s.scheduler, {request_params(kShared + " one", 8, greedy())}));
  }
  GpuScheduler s = make(c);
  ASSERT_NE(s.scheduler, nullptr);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s.scheduler, {request_params(kShared + " two", 8, greedy())}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], static_cast<int>(kShared.size()) / 16 * 16);
  EXPECT_GT(s->cache()->stats().tier[2].promotions, 0);
}

// KV the CPU computed and wrote to L3 is not served to the GPU after a
// restart on the same directory (its last bits may differ from the GPU's):
// the store starts empty under the GPU's fingerprint and the GPU recomputes.
TEST_F(CudaKvCacheTest, KvTheCpuWroteToL3IsNotServedToTheGpu) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.max_kv_tokens = 4096;
  c.cache.write_policy = WritePolicy::kWriteThrough;
  {
    auto cpu = Scheduler::create(*model_, tokenizer_, c);
    ASSERT_TRUE(cpu.has_value()) << cpu.error();
    std::vector<RequestId> ids;
    ASSERT_TRUE(
        test_util::submit_and_run(**cpu, {request_params(kShared + " one", 8, greedy())}, ids));
    (*cpu)->cache()->drain();
    ASSERT_GT((*cpu)->cache()->stats().tier[2].used_blocks, 0) << "the CPU wrote nothing to L3";
  }
  GpuScheduler s = make(c);
  ASSERT_NE(s.scheduler, nullptr);
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s.scheduler, {request_params(kShared + " two", 8, greedy())}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens()[2], 0);
  EXPECT_EQ(s->cache()->stats().tier[2].promotions, 0);
}

// int8 tiers under an L1 on the GPU: encoded and decoded on the host, the
// block passing through a host buffer, or on the GPU (CudaKvCodec), which
// gives the host codec's bytes: the same tokens either way, under pressure
// through L2 and L3.
TEST_F(CudaKvCacheTest, Int8TiersGiveTheSameTokensEncodedOnTheHostOrTheGpu) {
  const std::vector<std::string> stems = {"Love is a ", "The fortune you seek ",
                                          "It is a truth universally ", "A bird in the hand "};
  std::vector<std::vector<int>> tokens[2];
  for (const bool codec : {false, true}) {
    SCOPED_TRACE(codec ? "GPU codec" : "host codec");
    test_util::TempDir dir;
    SchedulerConfig c = tiered(dir.path() / "l3");
    c.cache.l2_format = c.cache.l3_format = KvFormat::kInt8;
    GpuScheduler s = make(c, codec);
    ASSERT_NE(s.scheduler, nullptr);
    for (int round = 0; round < 3; ++round) {
      std::vector<RequestParams> part;
      for (std::size_t i = 0; i < stems.size(); ++i)
        part.push_back(request_params(stems[i] + kShared.substr(0, 40 + 8 * i), 6, greedy()));
      std::vector<RequestId> ids;
      ASSERT_TRUE(test_util::submit_and_run(*s.scheduler, part, ids)) << "round " << round;
      for (RequestId id : ids) {
        const Request* r = s->find(id);
        EXPECT_EQ(r->generated().size(), 6u);
        tokens[codec].emplace_back(r->generated().begin(), r->generated().end());
      }
    }
    s->cache()->drain();
    const CacheStats st = s->cache()->stats();
    EXPECT_GT(st.tier[1].promotions, 0);
    EXPECT_GT(st.tier[2].demotions, 0);
    EXPECT_EQ(st.tier[2].checksum_failures, 0);
  }
  EXPECT_EQ(tokens[0], tokens[1]);
}

TEST_F(CudaKvCacheTest, RefusesH2oWithTheReason) {
  SchedulerConfig h2o;
  GpuScheduler s = make(h2o);
  ASSERT_NE(s.scheduler, nullptr);
  RequestParams p = request_params("Love is", 4, greedy());
  p.eviction = EvictionPolicy::h2o(16, 16, 64);
  auto id = s->submit(p);
  ASSERT_FALSE(id.has_value());
  EXPECT_TRUE(test_util::contains(id.error(), "attention scores")) << id.error();
}

}  // namespace
}  // namespace kvtier
