// Eviction policies inside the scheduler, on the bundled model: each
// request's tokens equal generate() alone with the same policy whatever the
// batch and budget; swap preemption keeps them exact; admission charges the
// effective size, so the budget is neither over- nor under-counted. The same
// on a nanochat model (rotary keys kept as written, or turned by cache
// rotation; windowed layers, smear): every policy, any batch, and H2O
// swapped out and back. Rotation refused where it cannot apply.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/scheduling/scheduler.h"
#include "nanochat_test_util.h"
#include "scheduler_test_util.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

class SchedulerEvictionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = &test_util::bundled_model().model;
    tokenizer_ = test_util::bundled_model().tokenizer.get();
  }

  // With the eviction policy this suite varies; sampled with `seed`, or
  // greedy without one.
  static RequestParams params(std::string_view prompt, int max_tokens, EvictionPolicy policy,
                              std::uint64_t seed = 0) {
    RequestParams p = test_util::request_params(
        prompt, max_tokens, seed == 0 ? test_util::greedy() : test_util::sampled(seed));
    p.eviction = policy;
    return p;
  }

  // generate() alone with the request's policy, from a pool with room for
  // the longest request here.
  static std::vector<int> alone(const RequestParams& p) {
    return test_util::alone(p, 16, 64).tokens;
  }

  // Runs to the end with the invariants after every step; returns the
  // largest number of pages the budget counted at once.
  static int run(Scheduler& s, const std::vector<RequestParams>& reqs,
                 std::vector<RequestId>& ids) {
    for (const RequestParams& p : reqs) ids.push_back(*s.submit(p));
    int peak = 0;
    for (int guard = 0; s.has_work() && guard < 20000; ++guard) {
      for (const RequestEvent& e : s.step().events) EXPECT_TRUE(e.error.empty()) << e.error;
      const auto ok = s.check_invariants();
      EXPECT_TRUE(ok.has_value()) << ok.error();
      if (!ok) break;
      peak = std::max(peak, s.stats().blocks_used);
    }
    EXPECT_FALSE(s.has_work());
    return peak;
  }

  static Model* model_;
  static Tokenizer* tokenizer_;
};

Model* SchedulerEvictionTest::model_ = nullptr;
Tokenizer* SchedulerEvictionTest::tokenizer_ = nullptr;

const std::vector<std::string> kPrompts = {"Q: What is the difference between a duck?", "Love is",
                                           "The fortune you seek is in another cookie."};

// Cache rotation needs rotary positions: the bundled model is GPT-2's kind,
// whose positions are learned. Refused as a request's policy and as the
// default, with the reason.
TEST_F(SchedulerEvictionTest, RotationIsRefusedForLearnedPositions) {
  const EvictionPolicy rotating = EvictionPolicy::h2o(16, 16, 64).with_rotation(true);
  SchedulerConfig c;
  auto s = Scheduler::create(*model_, tokenizer_, c);
  ASSERT_TRUE(s.has_value()) << s.error();
  const auto refused = (*s)->submit(params(kPrompts[0], 8, rotating));
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "rotate=on moves the kept keys")) << refused.error();
  EXPECT_TRUE(contains(refused.error(), "positions are learned, not rotary")) << refused.error();
  c.eviction = rotating;
  const auto not_made = Scheduler::create(*model_, tokenizer_, c);
  ASSERT_FALSE(not_made.has_value());
  EXPECT_TRUE(contains(not_made.error(), "positions are learned, not rotary")) << not_made.error();
}

TEST_F(SchedulerEvictionTest, TokensMatchGenerateAloneWithTheSamePolicyForAnyBatch) {
  const std::vector<EvictionPolicy> policies = {
      EvictionPolicy::sliding_window(32),
      EvictionPolicy::sliding_window(16, 8),
      EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kSum),
      EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kNormSum),
      EvictionPolicy::h2o(16, 16, 64).with_kvcrush(1, KvCrushAnchor::kMean),
      EvictionPolicy::h2o(16, 16, 64).with_snapkv(8)};
  for (const EvictionPolicy& policy : policies) {
    std::vector<RequestParams> reqs;
    for (std::size_t i = 0; i < kPrompts.size(); ++i)
      reqs.push_back(params(kPrompts[i], 120, policy, i == 1 ? 5 : 0));
    for (int batch : {1, 3}) {
      SchedulerConfig c;
      c.max_kv_tokens = 4096;
      c.max_batch_size = batch;
      c.token_budget = batch == 1 ? 7 : 64;  // chunked and whole prefills
      auto s = std::move(*Scheduler::create(*model_, tokenizer_, c));
      std::vector<RequestId> ids;
      run(*s, reqs, ids);
      for (std::size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(std::vector<int>(s->find(ids[i])->generated().begin(),
                                   s->find(ids[i])->generated().end()),
                  alone(reqs[i]))
            << policy.to_string() << " batch " << batch << " request " << i;
      EXPECT_GT(s->stats().evicted_blocks, 0) << policy.to_string();
      EXPECT_EQ(s->stats().preemptions, 0);
    }
  }
}

// Not over-counted: three requests whose full KV (3 x 15 pages) is far over
// the budget run side by side without a preemption, because each is charged
// its effective size. Not under-counted: the pages counted at the peak are
// the pages resident, never more than the budget (check_invariants), and a
// request whose effective size exceeds the budget is refused.
TEST_F(SchedulerEvictionTest, BudgetCountsEffectiveSizeBothWays) {
  const EvictionPolicy window = EvictionPolicy::sliding_window(32);
  std::vector<RequestParams> reqs;
  for (const std::string& p : kPrompts) reqs.push_back(params(p, 200, window));
  SchedulerConfig c;
  c.max_kv_tokens = 3 * 64;  // 12 pages: each request peaks at 4 (prompt or window + 1)
  c.max_batch_size = 3;
  c.token_budget = 64;
  auto s = std::move(*Scheduler::create(*model_, tokenizer_, c));
  std::vector<RequestId> ids;
  const int peak = run(*s, reqs, ids);
  EXPECT_EQ(s->stats().preemptions, 0);
  int charged = 0;
  for (const RequestParams& p : reqs)
    charged += effective_kv_tokens(window, static_cast<int>(p.prompt.size()),
                                   static_cast<int>(p.prompt.size()) + 199, 16) /
               16;
  EXPECT_LE(peak, charged);
  EXPECT_GE(peak, charged - 3) << "fewer pages counted than the windows hold";
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(s->find(ids[i])->num_generated(), 200);

  // Without the policy the same request is refused: it could never fit.
  SchedulerConfig small = c;
  small.max_kv_tokens = 64;
  auto t = std::move(*Scheduler::create(*model_, tokenizer_, small));
  RequestParams full = reqs[0];
  full.eviction = EvictionPolicy::none();
  auto refused = t->submit(full);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "max_kv_tokens allows 64"));
  EXPECT_TRUE(t->submit(reqs[0]).has_value());
}

TEST_F(SchedulerEvictionTest, SwapPreemptionKeepsEvictingRequestsExact) {
  const EvictionPolicy policy = EvictionPolicy::h2o(16, 16, 64);
  std::vector<RequestParams> reqs;
  for (std::size_t i = 0; i < kPrompts.size(); ++i)
    reqs.push_back(params(kPrompts[i], 150, policy, i + 1));
  SchedulerConfig c;
  c.prefix_cache = true;
  c.preemption = PreemptionMode::kSwap;
  c.cache.l2_bytes = 64 * 65536;
  c.max_kv_tokens = 9 * 16;  // three requests of up to 5 pages: someone must wait
  c.max_batch_size = 3;
  c.token_budget = 16;
  auto s = std::move(*Scheduler::create(*model_, tokenizer_, c));
  std::vector<RequestId> ids;
  run(*s, reqs, ids);
  EXPECT_GT(s->stats().preemptions, 0);
  EXPECT_EQ(s->stats().recomputed_tokens, 0);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(
        std::vector<int>(s->find(ids[i])->generated().begin(), s->find(ids[i])->generated().end()),
        alone(reqs[i]))
        << "request " << i;
  EXPECT_EQ(s->cache()->stats().nodes, 0u) << "evicting requests must not fill the shared cache";
}

// A request that keeps a window has generated past max_kv_tokens when a
// more urgent one takes its pages. Swapped out, it comes back with the pages
// it kept (not a page for every token it has seen) and ends exactly as
// alone. Preempted for recompute, its re-prefill would need a page for every
// token, which the budget can never give: it fails and says why, instead of
// waiting at the head of the queue for ever.
TEST_F(SchedulerEvictionTest, AWindowedRequestPreemptedPastTheBudgetNeverWedgesTheQueue) {
  const EvictionPolicy policy = EvictionPolicy::sliding_window(64);  // 5 pages at most
  const RequestParams long_one = params("Love is", 240, policy);
  RequestParams urgent = params("The fortune you seek is in ano", 100, policy);
  for (const PreemptionMode mode : {PreemptionMode::kSwap, PreemptionMode::kRecompute}) {
    SCOPED_TRACE(mode == PreemptionMode::kSwap ? "swap" : "recompute");
    SchedulerConfig c;
    c.policy = SchedulingPolicy::kPriority;
    c.max_kv_tokens = 8 * 16;
    c.max_batch_size = 2;
    c.token_budget = 16;
    c.preemption = mode;
    if (mode == PreemptionMode::kSwap) {
      c.prefix_cache = true;
      c.cache.l2_bytes = 64 * 65536;
    }
    auto s = std::move(*Scheduler::create(*model_, tokenizer_, c));
    RequestParams background = long_one;
    background.priority = 1;
    const RequestId a = *s->submit(background);
    for (int guard = 0; s->find(a)->generated().size() < 150 && guard < 1000; ++guard)
      (void)s->step();
    ASSERT_EQ(s->find(a)->generated().size(), 150u);
    const RequestId b = *s->submit(urgent);
    std::vector<std::string> errors;
    for (int guard = 0; s->has_work() && guard < 5000; ++guard) {
      for (const RequestEvent& e : s->step().events)
        if (!e.error.empty()) errors.push_back(e.error);
      const auto ok = s->check_invariants();
      ASSERT_TRUE(ok.has_value()) << ok.error();
    }
    EXPECT_FALSE(s->has_work()) << "request a: " << to_string(*s->status(a));
    EXPECT_GT(s->stats().preemptions, 0);
    EXPECT_EQ(std::vector<int>(s->find(b)->generated().begin(), s->find(b)->generated().end()),
              alone(urgent));
    if (mode == PreemptionMode::kSwap) {
      EXPECT_TRUE(errors.empty());
      EXPECT_EQ(std::vector<int>(s->find(a)->generated().begin(), s->find(a)->generated().end()),
                alone(background));
    } else {
      EXPECT_EQ(s->status(a), RequestStatus::kFailed);
      ASSERT_EQ(errors.size(), 1u);
      EXPECT_TRUE(contains(errors[0], "max_kv_tokens")) << errors[0];
    }
  }
}

// A nanochat model of generation 5 (windows, smear, value embeddings) with
// two KV heads for four query heads. Its keys keep the rotation of the
// position they were written at, whichever pages are dropped around them.
TEST(SchedulerEvictionNanochatTest, EveryPolicyMatchesGenerateAloneForAnyBatchAndSwap) {
  nanochat_test::NanochatFolder folder({5, 2});
  auto model = Model::load(folder.path());
  ASSERT_TRUE(model.has_value()) << model.error();
  auto tokenizer = Tokenizer::load((*model)->config().tokenizer);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.error();
  std::vector<std::vector<int>> prompts;
  for (const std::string& p : kPrompts) prompts.push_back(*(*tokenizer)->encode(p));
  auto alone = [&](const RequestParams& p) {
    tiers::BlockPool pool((*model)->kv_layout(16).block_bytes(), 64);
    GenerateOptions o;
    o.sampling = p.sampling;
    o.max_tokens = p.max_tokens;
    o.eviction = *p.eviction;
    auto g = generate(**model, pool, tokenizer->get(), p.prompt, o);
    EXPECT_TRUE(g.has_value()) << g.error();
    return g.value_or(Generation{}).tokens;
  };
  auto run = [&](const SchedulerConfig& c, const std::vector<RequestParams>& reqs,
                 const std::string& what) {
    auto s = Scheduler::create(**model, tokenizer->get(), c);
    ASSERT_TRUE(s.has_value()) << s.error();
    std::vector<RequestId> ids;
    for (const RequestParams& p : reqs) ids.push_back(*(*s)->submit(p));
    for (int guard = 0; (*s)->has_work() && guard < 20000; ++guard) {
      for (const RequestEvent& e : (*s)->step().events) EXPECT_TRUE(e.error.empty()) << e.error;
      const auto ok = (*s)->check_invariants();
      ASSERT_TRUE(ok.has_value()) << ok.error();
    }
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto out = (*s)->find(ids[i])->generated();
      EXPECT_EQ(std::vector<int>(out.begin(), out.end()), alone(reqs[i]))
          << what << ", request " << i;
    }
    EXPECT_GT((*s)->stats().evicted_blocks, 0) << what;
    if (c.preemption == PreemptionMode::kSwap) {
      EXPECT_GT((*s)->stats().preemptions, 0) << what;
      EXPECT_EQ((*s)->stats().recomputed_tokens, 0) << what;
    }
  };
  for (const EvictionPolicy& policy :
       {EvictionPolicy::sliding_window(32), EvictionPolicy::sliding_window(16, 8),
        EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kSum),
        EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kNormSum),
        EvictionPolicy::h2o(16, 16, 64).with_rotation(true)}) {
    std::vector<RequestParams> reqs;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      RequestParams p;
      p.prompt = prompts[i];
      p.max_tokens = 120;
      p.sampling = i == 1 ? test_util::sampled(5) : test_util::greedy();
      p.eviction = policy;
      reqs.push_back(p);
    }
    for (int batch : {1, 3}) {
      SchedulerConfig c;
      c.max_kv_tokens = 4096;
      c.max_batch_size = batch;
      c.token_budget = batch == 1 ? 7 : 64;  // chunked and whole prefills
      run(c, reqs, policy.to_string() + " batch " + std::to_string(batch));
    }
    if (!policy.needs_scores()) continue;  // H2O's pages (5 a request) overflow this budget
    SchedulerConfig swap;
    swap.prefix_cache = true;
    swap.preemption = PreemptionMode::kSwap;
    swap.cache.l2_bytes = 64 * (*model)->kv_layout(16).block_bytes();
    swap.max_kv_tokens = 9 * 16;  // three requests of up to 5 pages: someone must wait
    swap.max_batch_size = 3;
    swap.token_budget = 16;
    run(swap, reqs, policy.to_string() + " swapped");
  }

  // Rotation rewrites the pages a request keeps, which samples would share.
  auto s = Scheduler::create(**model, tokenizer->get(), SchedulerConfig{});
  ASSERT_TRUE(s.has_value()) << s.error();
  RequestParams two;
  two.prompt = prompts[0];
  two.max_tokens = 8;
  two.n = 2;
  two.sampling = test_util::sampled(3);
  two.eviction = EvictionPolicy::h2o(16, 16, 64).with_rotation(true);
  const auto refused = (*s)->submit(two);
  ASSERT_FALSE(refused.has_value());
  EXPECT_TRUE(contains(refused.error(), "2 samples would share; ask for n=1")) << refused.error();
  two.eviction->rotate = false;
  EXPECT_TRUE((*s)->submit(two).has_value());
}

}  // namespace
}  // namespace kvtier
