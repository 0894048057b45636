// The scheduler with the prefix cache and its tiers on a nanochat model
// (generation 5: grouped-query attention, rotary keys, short windows,
// value embeddings and smear, whose input at a chunk's start is the
// request's own previous id): under pressure blocks go down to L2 and L3
// and come back; swap preemption recomputes nothing; a prefix on L3 comes
// up whole, by layer, or split (its front recomputed while the rest
// loads) with the bytes it was stored with. Every request's tokens equal
// running it alone with generate(), bit for bit, and check_invariants()
// holds after every step. (tiered_scheduler_test.cpp does the same and
// more on the bundled GPT-2 model.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/scheduling/scheduler.h"
#include "nanochat_test_util.h"
#include "scheduler_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::greedy;
using test_util::sampled;

// About 120 of this tokenizer's tokens (its merges are 35 common pairs).
const std::string kShared =
    "the other one at the station ran to the sea and on the hill the rest sat still, "
    "then the tide came in over the sand and the others ";

class TieredNanochatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(folder_.path());
    ASSERT_TRUE(model.has_value()) << model.error();
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::load(model_->config().tokenizer);
    ASSERT_TRUE(tokenizer.has_value()) << tokenizer.error();
    tokenizer_ = std::move(*tokenizer);
  }

  RequestParams params(const std::string& prompt, int max_tokens, SamplingParams sampling) {
    RequestParams p;
    p.prompt = tokenizer_->encode(prompt).value_or(std::vector<int>{});
    p.max_tokens = max_tokens;
    p.sampling = sampling;
    return p;
  }

  std::vector<int> alone(const RequestParams& p) {
    tiers::BlockPool pool(model_->kv_layout(16).block_bytes(), 32);
    GenerateOptions o;
    o.sampling = p.sampling;
    o.max_tokens = p.max_tokens;
    auto g = generate(*model_, pool, tokenizer_.get(), p.prompt, o);
    EXPECT_TRUE(g.has_value()) << g.error();
    return g.value_or(Generation{}).tokens;
  }

  std::unique_ptr<Scheduler> make(const SchedulerConfig& c, tiers::BlockPool* pool = nullptr) {
    auto s = Scheduler::create(*model_, tokenizer_.get(), c, pool);
    EXPECT_TRUE(s.has_value()) << s.error();
    return s ? std::move(*s) : nullptr;
  }

  ::testing::AssertionResult run_and_compare(Scheduler& s, const std::vector<RequestParams>& reqs,
                                             std::vector<RequestId>* ids_out = nullptr) {
    std::vector<RequestId> ids;
    if (auto ran = test_util::submit_and_run(s, reqs, ids); !ran) return ran;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto out = s.find(ids[i])->generated();
      if (std::vector<int>(out.begin(), out.end()) != alone(reqs[i]))
        return ::testing::AssertionFailure() << "request " << i << " differs from its solo run";
    }
    if (ids_out) *ids_out = ids;
    return ::testing::AssertionSuccess();
  }

  SchedulerConfig tiered(const std::filesystem::path& l3) const {
    const std::size_t block = model_->kv_layout(16).block_bytes();
    SchedulerConfig c;
    c.prefix_cache = true;
    c.max_kv_tokens = 4096;
    c.max_batch_size = 4;
    c.token_budget = 32;
    c.cache.l2_bytes = 16 * block;
    c.cache.l3_path = l3.string();
    c.cache.l3_bytes = 256 * block;
    return c;
  }

  nanochat_test::NanochatFolder folder_{{5, 2}};
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TieredNanochatTest, PressureAndSwapMoveBlocksDownAndBackWithoutChangingTokens) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.max_kv_tokens = 12 * 16;
  c.cache.l2_bytes = 6 * model_->kv_layout(16).block_bytes();
  auto s = make(c);
  ASSERT_NE(s, nullptr);
  const std::vector<std::string> stems = {"love is a ", "the fortune you seek ", "it is a truth ",
                                          "a bird in the hand "};
  for (int round = 0; round < 3; ++round) {
    std::vector<RequestParams> reqs;
    for (std::size_t i = 0; i < stems.size(); ++i)
      reqs.push_back(params(stems[i] + kShared.substr(0, 60 + 12 * i), 6,
                            round == 1 ? sampled(round * 10 + i) : greedy()));
    ASSERT_TRUE(run_and_compare(*s, reqs)) << "round " << round;
  }
  s->cache()->drain();
  const CacheStats st = s->cache()->stats();
  EXPECT_GT(st.tier[1].demotions, 0);
  EXPECT_GT(st.tier[2].demotions, 0);
  EXPECT_GT(st.tier[1].promotions, 0);
  EXPECT_GT(st.tier[2].promotions, 0);
  EXPECT_EQ(st.tier[2].checksum_failures, 0);

  // Five requests in a budget of 6 pages of 8: they swap each other out.
  SchedulerConfig tight = tiered(dir.path() / "l3-swap");
  tight.page_size = 8;
  tight.max_kv_tokens = 48;
  tight.token_budget = 8;
  tight.preemption = PreemptionMode::kSwap;
  std::vector<RequestParams> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(params(stems[i % stems.size()] + kShared.substr(0, 5 * i), 16,
                          i % 2 ? sampled(40 + i) : greedy()));
  auto swapping = make(tight);
  ASSERT_NE(swapping, nullptr);
  ASSERT_TRUE(run_and_compare(*swapping, reqs));
  EXPECT_GT(swapping->stats().preemptions, 0) << "the budget never forced a swap";
  EXPECT_EQ(swapping->stats().recomputed_tokens, 0);
  EXPECT_EQ(swapping->stats().swapped_in, swapping->stats().swapped_out);
}

TEST_F(TieredNanochatTest, AnL3PrefixComesUpWholeByLayerOrSplitWithItsStoredBytes) {
  for (const int mode : {0, 1, 2}) {  // whole blocks, by layer, split
    SCOPED_TRACE(mode == 0 ? "whole" : mode == 1 ? "by layer" : "split");
    test_util::TempDir dir;
    SchedulerConfig c = tiered(dir.path() / "l3");
    c.cache.write_policy = WritePolicy::kWriteThrough;
    c.cache.load_by_layer = mode != 0;
    const KvLayout layout = model_->kv_layout(16);
    const Scheduler::L1Shape shape = Scheduler::l1_shape(layout, c);
    tiers::BlockPool pool(shape.block_bytes, shape.blocks, tiers::Memory::kPageAligned);
    auto s = make(c, &pool);
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(run_and_compare(*s, {params(kShared + "one", 4, greedy())}));

    const RequestParams next = params(kShared + "two", 8, sampled(3));
    const int blocks = (static_cast<int>(next.prompt.size()) - 1) / 16;
    ASSERT_GE(blocks, 4);
    auto l1_bytes = [&](int b) {
      return test_util::l1_block_bytes(*s, pool, layout.block_bytes(), next.prompt, b);
    };
    std::vector<std::vector<std::byte>> computed;
    for (int b = 0; b < blocks; ++b) {
      const auto bytes = l1_bytes(b);
      ASSERT_FALSE(bytes.empty()) << "block " << b;
      computed.emplace_back(bytes.begin(), bytes.end());
    }
    s->cache()->drain();
    s->cache()->flush(Tier::kL1);
    s->cache()->flush(Tier::kL2);  // the prefix in L3 alone
    int recompute = 0;
    if (mode == 2) {
      // Staged figures under which reading a block costs what recomputing
      // its 16 tokens does: the run is split.
      TierCosts k;
      k.prefill = {{16, 16e-3, 1}, {128, 128e-3, 1}};
      k.load[Tier::kL3] = {0, 16e-3, 1};
      s->cache()->cost_model().pin(k);
      recompute = s->cache()
                      ->cost_model()
                      .plan({.blocks = blocks,
                             .reads = blocks,
                             .splittable = blocks,
                             .suffix_tokens = static_cast<int>(next.prompt.size()) - blocks * 16},
                            16, {.chunk = c.token_budget})
                      .recompute;
      ASSERT_GT(recompute, 0);
      ASSERT_LT(recompute, blocks) << "the staged figures split the run";
    } else {
      // Loading always wins: the figures a slow machine might measure
      // must not turn this into a recompute.
      TierCosts k;
      k.prefill = {{16, 1.0, 1}, {128, 8.0, 1}};
      k.load[Tier::kL3] = {0, 1e-6, 1};
      s->cache()->cost_model().pin(k);
    }
    std::vector<RequestId> ids;
    ASSERT_TRUE(run_and_compare(*s, {next}, &ids));
    EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{0, 0, (blocks - recompute) * 16}}));
    EXPECT_EQ(s->stats().discarded_passes, 0);
    EXPECT_EQ(s->cache()->stats().tier[2].checksum_failures, 0);
    for (int b = 0; b < blocks; ++b) {
      const auto bytes = l1_bytes(b);
      ASSERT_EQ(bytes.size(), computed[b].size()) << "block " << b << " is not in L1";
      EXPECT_EQ(std::memcmp(bytes.data(), computed[b].data(), bytes.size()), 0)
          << "block " << b << (b < recompute ? " (recomputed)" : " (loaded)");
    }
  }
}

// A prefix longer than the short window comes up from L3 (and L2) without
// the short layers of the blocks no query of the request reads: half of those blocks'
// bytes (layers 0 and 1 of 4 are short) stay on the disk, and the tokens are
// those of running alone. A later request whose queries start earlier needs
// those layers: it recomputes from the first block lacking them (never reading
// the absent bytes), and the block it computes takes the place of the copy
// without them. Nothing without its layers ever goes down a tier: once L1 is
// flushed, the same prompt comes back from L2 and L3 with the same tokens.
TEST_F(TieredNanochatTest, ShortWindowLayersReadOnlyTheBlocksTheirQueriesSee) {
  test_util::TempDir dir;
  SchedulerConfig c = tiered(dir.path() / "l3");
  c.cache.write_policy = WritePolicy::kWriteThrough;
  const KvLayout layout = model_->kv_layout(16);
  const Scheduler::L1Shape shape = Scheduler::l1_shape(layout, c);
  tiers::BlockPool pool(shape.block_bytes, shape.blocks, tiers::Memory::kPageAligned);
  auto s = make(c, &pool);
  ASSERT_NE(s, nullptr);
  // Free L1 blocks hold NaNs: bytes a read leaves out stay NaN, and any
  // query that read them would show it.
  auto poison_free_l1 = [&] {
    for (int b = 0; b < pool.num_blocks(); ++b)
      if (!pool.is_allocated(b)) std::memset(pool.data(b), 0xFF, pool.block_bytes());
  };
  ASSERT_EQ(layout.windows, (std::vector<int>{128, 128, 256, 256}));
  // Loading always wins (see the test above).
  TierCosts k;
  k.prefill = {{16, 1.0, 1}, {128, 8.0, 1}};
  k.load[Tier::kL3] = {0, 1e-6, 1};
  s->cache()->cost_model().pin(k);

  std::vector<int> text = tokenizer_->encode(kShared + kShared + kShared + kShared).value();
  ASSERT_GE(text.size(), 300u);
  auto prompt = [&](int n, int last) {
    RequestParams p;
    p.prompt.assign(text.begin(), text.begin() + n);
    p.prompt.push_back(last);
    p.max_tokens = 6;
    p.sampling = sampled(7);
    return p;
  };
  ASSERT_TRUE(run_and_compare(*s, {prompt(288, 40)}));
  s->cache()->drain();
  s->cache()->flush(Tier::kL1);
  s->cache()->flush(Tier::kL2);  // the prefix in L3 alone
  poison_free_l1();

  // 18 blocks, its first query at 288: layers 0 and 1 (window 128) read
  // positions from 160 on, layers 2 and 3 (256) from 32 on. So blocks 0..1
  // come up with no layer at all, blocks 2..9 without layers 0 and 1.
  std::vector<RequestId> ids;
  ASSERT_TRUE(run_and_compare(*s, {prompt(288, 41)}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{0, 0, 18 * 16}}));
  const TierStats l3 = s->cache()->stats().tier[Tier::kL3];
  const long layer = static_cast<long>(layout.layer_bytes());
  EXPECT_EQ(l3.bytes_skipped, (2 * 4 + 8 * 2) * layer);
  EXPECT_EQ(l3.bytes_out + l3.bytes_skipped, 18 * 4 * layer);
  EXPECT_EQ(l3.checksum_failures, 0);

  // Its first query at 144 reads every layer of block 0 and layers 0 and 1
  // from 16 on, which the copies lack: all 9 blocks are recomputed, and
  // then they are whole.
  ASSERT_TRUE(run_and_compare(*s, {prompt(144, 42)}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), TierCounts{});
  ASSERT_TRUE(run_and_compare(*s, {prompt(144, 43)}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{9 * 16, 0, 0}}))
      << "the recomputed blocks replaced the copies without their layers";

  // Block 9 still lacks layers 0 and 1: flushed, it is dropped, never
  // copied (L3 has it). The whole ones go to L2. A first query at 160 reads
  // block 9's layers 0 and 1: it comes up whole from L3; from L2, blocks 0
  // and 1 come up without layers 0 and 1 (they read from 32 on).
  ASSERT_TRUE(s->cache()->check_invariants());
  s->cache()->flush(Tier::kL1);
  poison_free_l1();
  ASSERT_EQ(s->cache()->stats().tier[Tier::kL2].bytes_skipped, 0);
  ASSERT_TRUE(run_and_compare(*s, {prompt(160, 44)}, &ids));
  EXPECT_EQ(s->find(ids[0])->cached_tokens(), (TierCounts{{0, 9 * 16, 16}}));
  const TierStats l2 = s->cache()->stats().tier[Tier::kL2];
  EXPECT_EQ(l2.bytes_skipped, 2 * 2 * layer);
  EXPECT_EQ(l2.bytes_out, 9 * 4 * layer - l2.bytes_skipped);
  EXPECT_EQ(s->stats().discarded_passes, 0);
}

}  // namespace
}  // namespace kvtier
