// Eviction policies: parsing and validation, which pages each policy drops
// (window and sinks at page granularity, H2O by score with both
// aggregations), effective_kv_tokens() agreeing with what generate() really
// holds, and generate() with a policy: deterministic, independent of prefill
// chunking, and exactly the full cache when nothing is evicted.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/model/generator.h"
#include "engine/model/kv_evictor.h"
#include "tests/test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

TEST(EvictionPolicyTest, ParsesEveryFormAndWritesItBack) {
  struct Case {
    const char* text;
    EvictionPolicy want;
    const char* canonical;
  };
  const Case cases[] = {
      {"none", EvictionPolicy::none(), "none"},
      {"window:32", EvictionPolicy::sliding_window(32), "window:32"},
      {"sinks:4,window:28", EvictionPolicy::sliding_window(28, 4), "sinks:4,window:28"},
      {"window:28,sinks:4", EvictionPolicy::sliding_window(28, 4), "sinks:4,window:28"},
      {"h2o:start=16,recent=32,max=128,agg=sum",
       EvictionPolicy::h2o(16, 32, 128, ScoreAggregation::kSum),
       "h2o:start=16,recent=32,max=128,agg=sum"},
      {"h2o:max=128,recent=32,start=0", EvictionPolicy::h2o(0, 32, 128),
       "h2o:start=0,recent=32,max=128,agg=norm_sum"},
      {"h2o:start=16,recent=32,max=128,kvcrush=2:mean",
       EvictionPolicy::h2o(16, 32, 128).with_kvcrush(2, KvCrushAnchor::kMean),
       "h2o:start=16,recent=32,max=128,agg=norm_sum,kvcrush=2:mean"},
      {"h2o:kvcrush=1:random,start=0,recent=0,max=64,agg=sum",
       EvictionPolicy::h2o(0, 0, 64, ScoreAggregation::kSum)
           .with_kvcrush(1, KvCrushAnchor::kRandom),
       "h2o:start=0,recent=0,max=64,agg=sum,kvcrush=1:random"},
      {"h2o:start=0,recent=0,max=64,kvcrush=3:zeros",
       EvictionPolicy::h2o(0, 0, 64).with_kvcrush(3, KvCrushAnchor::kZeros),
       "h2o:start=0,recent=0,max=64,agg=norm_sum,kvcrush=3:zeros"},
      {"h2o:start=0,recent=0,max=64,kvcrush=3:ones",
       EvictionPolicy::h2o(0, 0, 64).with_kvcrush(3, KvCrushAnchor::kOnes),
       "h2o:start=0,recent=0,max=64,agg=norm_sum,kvcrush=3:ones"},
      {"h2o:start=16,recent=32,max=128,snapkv=8", EvictionPolicy::h2o(16, 32, 128).with_snapkv(8),
       "h2o:start=16,recent=32,max=128,agg=norm_sum,snapkv=8"},
      {"h2o:kvcrush=1:mean,snapkv=4,start=16,recent=32,max=128",
       EvictionPolicy::h2o(16, 32, 128).with_snapkv(4).with_kvcrush(1, KvCrushAnchor::kMean),
       "h2o:start=16,recent=32,max=128,agg=norm_sum,snapkv=4,kvcrush=1:mean"},
      {"h2o:start=0,recent=0,max=64,kvcrush=3:alternate",
       EvictionPolicy::h2o(0, 0, 64).with_kvcrush(3, KvCrushAnchor::kAlternate),
       "h2o:start=0,recent=0,max=64,agg=norm_sum,kvcrush=3:alternate"},
      {"h2o:rotate=on,start=16,recent=32,max=128,kvcrush=1:ones",
       EvictionPolicy::h2o(16, 32, 128).with_kvcrush(1, KvCrushAnchor::kOnes).with_rotation(true),
       "h2o:start=16,recent=32,max=128,agg=norm_sum,kvcrush=1:ones,rotate=on"},
      {"h2o:start=16,recent=32,max=128,rotate=off", EvictionPolicy::h2o(16, 32, 128),
       "h2o:start=16,recent=32,max=128,agg=norm_sum"},
  };
  for (const Case& c : cases) {
    auto p = EvictionPolicy::parse(c.text);
    ASSERT_TRUE(p.has_value()) << c.text << ": " << p.error();
    EXPECT_EQ(*p, c.want) << c.text;
    EXPECT_EQ(p->to_string(), c.canonical);
    EXPECT_EQ(EvictionPolicy::parse(p->to_string()).value(), *p);
  }
}

TEST(EvictionPolicyTest, RefusesBadTextWithTheReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "unknown policy"},
      {"lru", "unknown policy or setting 'lru'"},
      {"window", "unknown policy or setting 'window'"},
      {"window:", "window must be a whole number"},
      {"window:-3", "window must be a whole number"},
      {"window:8x", "window must be a whole number"},
      {"window:0", "window must be at least 1"},
      {"sinks:4", "sinks need a window"},
      {"window:8,window:9", "window is given twice"},
      {"h2o", "h2o needs its settings"},
      {"h2o:start=16,recent=32", "h2o needs start, recent and max"},
      {"h2o:start=16,recent=32,max=64,agg=mean", "agg must be sum or norm_sum"},
      {"h2o:start=16,recent=32,max=64,size=3", "unknown h2o setting 'size'"},
      {"h2o:start=16,start=0,recent=32,max=64", "start is given twice"},
      {"h2o:start,recent=32,max=64", "'start' is not key=value"},
      {"h2o:start=16,recent=32,max=64,kvcrush=2", "kvcrush must be BUDGET:ANCHOR"},
      {"h2o:start=16,recent=32,max=64,snapkv=0", "snapkv must be at least 1 query"},
      {"h2o:start=16,recent=32,max=64,snapkv=x", "snapkv must be a whole number"},
      {"h2o:start=16,recent=32,max=64,kvcrush=0:mean", "a budget of at least 1 page"},
      {"h2o:start=16,recent=32,max=64,kvcrush=2:median", "not '2:median'"},
      {"h2o:start=16,recent=32,max=64,kvcrush=1:mean,kvcrush=1:ones", "kvcrush is given twice"},
      {"h2o:start=16,recent=32,max=64,rotate=yes", "rotate must be on or off, not 'yes'"},
      {"h2o:start=16,recent=32,max=64,rotate=on,rotate=on", "rotate is given twice"},
      {"sinks:4,window:8,rotate:on", "unknown policy or setting 'rotate:on'"},
  };
  for (auto [text, why] : cases) {
    auto p = EvictionPolicy::parse(text);
    ASSERT_FALSE(p.has_value()) << text;
    EXPECT_TRUE(contains(p.error(), why)) << text;
    EXPECT_TRUE(contains(p.error(), "expected none, window:W")) << text;
  }
}

TEST(EvictionPolicyTest, ValidatesAgainstThePageSize) {
  EXPECT_TRUE(EvictionPolicy::sliding_window(8, 4).validate(16).has_value());
  EXPECT_TRUE(EvictionPolicy::h2o(16, 32, 64).validate(16).has_value());
  EXPECT_TRUE(contains(EvictionPolicy::h2o(10, 32, 64).validate(16).error(),
                       "start must be a multiple of page_size 16"));
  EXPECT_TRUE(contains(EvictionPolicy::h2o(16, 32, 100).validate(16).error(),
                       "max must be a multiple of page_size 16"));
  EXPECT_TRUE(contains(EvictionPolicy::h2o(16, 32, 48).validate(16).error(),
                       "max must be at least start + recent + page_size (64)"));
  EXPECT_TRUE(contains(EvictionPolicy::sliding_window(0).validate(16).error(),
                       "window must be at least 1"));
  const EvictionPolicy area_of_two = EvictionPolicy::h2o(16, 16, 64);
  EXPECT_TRUE(area_of_two.with_kvcrush(2, KvCrushAnchor::kMean).validate(16).has_value());
  EXPECT_TRUE(contains(area_of_two.with_kvcrush(3, KvCrushAnchor::kMean).validate(16).error(),
                       "the kvcrush budget of 3 pages is larger than the evictable area (2 pages"));
}

// A sequence grown one position at a time under `policy`, evicting after
// every position (the prompt is one token), checking at every length that
// the positions it promises to keep are resident.
void grow_and_check(const EvictionPolicy& policy, int page, int positions) {
  tiers::BlockPool pool(64, 64);
  SequenceKv kv(page);
  const KvEvictor evictor(policy, 256);
  int peak = 0;
  for (int L = 1; L <= positions; ++L) {
    ASSERT_TRUE(kv.reserve(pool, L));
    peak = std::max(peak, kv.resident_blocks());
    kv.advance(1);
    evictor.evict(kv, pool);
    for (int t = 0; t < L; ++t) {
      const bool promised = t >= L - policy.window || t < policy.sinks;
      if (promised) {
        ASSERT_FALSE(kv.is_evicted(t / page)) << policy.to_string() << " L " << L;
      }
    }
    // Outward rounding holds no more than a page beyond the promise.
    const int promised_pages =
        (std::min(L, policy.window) + page - 1) / page + 1 + (policy.sinks + page - 1) / page;
    ASSERT_LE(kv.resident_blocks(), promised_pages) << policy.to_string() << " L " << L;
  }
  EXPECT_EQ(peak * page, effective_kv_tokens(policy, 1, positions, page)) << policy.to_string();
  kv.release(pool);
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
}

TEST(EvictionPolicyTest, WindowsKeepEveryPageHoldingTheirPositions) {
  for (int window : {1, 8, 16, 32, 48, 50})
    for (int sinks : {0, 4, 16})
      grow_and_check(EvictionPolicy::sliding_window(window, sinks), 16, 200);
  grow_and_check(EvictionPolicy::sliding_window(5, 2), 3, 100);
}

TEST(EvictionPolicyTest, WindowPagesAtGivenLengths) {
  tiers::BlockPool pool(64, 16);
  auto grown = [&](int length) {
    SequenceKv kv(16);
    EXPECT_TRUE(kv.reserve(pool, length));
    kv.advance(length);
    return kv;
  };
  const std::span<const kernels::AttentionScore> no_scores;
  SequenceKv kv = grown(40);  // pages 0, 1 full, 2 partial
  EXPECT_EQ(pages_to_evict(EvictionPolicy::sliding_window(8), kv, no_scores), (std::vector{0, 1}));
  EXPECT_EQ(pages_to_evict(EvictionPolicy::sliding_window(9), kv, no_scores), (std::vector{0}));
  EXPECT_EQ(pages_to_evict(EvictionPolicy::sliding_window(8, 1), kv, no_scores), (std::vector{1}));
  EXPECT_TRUE(pages_to_evict(EvictionPolicy::sliding_window(40), kv, no_scores).empty());
  EXPECT_TRUE(pages_to_evict(EvictionPolicy::none(), kv, no_scores).empty());
  kv.release(pool);
  kv = grown(32);  // two full pages: the window of 16 is page 1 exactly
  EXPECT_EQ(pages_to_evict(EvictionPolicy::sliding_window(16), kv, no_scores), (std::vector{0}));
  kv.release(pool);
}

// H2O drops the lowest-scoring evictable page: by raw sums an old page
// looks important, normalised by its age it does not.
TEST(EvictionPolicyTest, H2oEvictsTheLowestScoringEvictablePage) {
  tiers::BlockPool pool(64, 16);
  SequenceKv kv(4);
  ASSERT_TRUE(kv.reserve(pool, 16));
  kv.advance(16);  // pages 0..3; start = page 0, recent = page 3, limit 3 pages
  std::vector<kernels::AttentionScore> scores(16, 0);
  for (int t = 4; t < 8; ++t) scores[t] = 10;  // page 1: seen by 12..9 queries
  for (int t = 8; t < 12; ++t) scores[t] = 8;  // page 2: seen by 8..5 queries
  const auto sum = EvictionPolicy::h2o(4, 4, 12, ScoreAggregation::kSum);
  const auto norm = EvictionPolicy::h2o(4, 4, 12, ScoreAggregation::kNormSum);
  EXPECT_EQ(pages_to_evict(sum, kv, scores), (std::vector{2}));
  EXPECT_EQ(pages_to_evict(norm, kv, scores), (std::vector{1}));
  // Under the cap: nothing. Start and recent pages never go, however low.
  EXPECT_TRUE(pages_to_evict(EvictionPolicy::h2o(4, 4, 16), kv, scores).empty());
  const auto wide = EvictionPolicy::h2o(4, 4, 8, ScoreAggregation::kSum);
  EXPECT_EQ(pages_to_evict(wide, kv, scores), (std::vector{1, 2}));
  // Ties go to the older page.
  std::fill(scores.begin(), scores.end(), 5);
  EXPECT_EQ(pages_to_evict(sum, kv, scores), (std::vector{1}));
  kv.evict_block(pool, 1);
  EXPECT_TRUE(pages_to_evict(sum, kv, scores).empty());
  kv.release(pool);
}

// KVCrush keeps, of the pages score-based eviction would drop, the one at
// evenly spaced ranks of Hamming distance to the anchor. Pages of 4; a
// length of 32 (8 pages), start page 0, recent page 7, room for 4: 4 of the
// evictable pages 1..6 go. Bits (the better-scored 12 of its 24 positions):
//   page 1 1010, 2 0101, 3 1100, 4 0000, 5 1100, 6 1111 (the best score);
// the mean anchor is 1100 (positions 0 and 1 are 1 in 4 of 6 pages).
TEST(EvictionPolicyTest, KvCrushKeepsThePagesTheAnchorPicks) {
  tiers::BlockPool pool(64, 16);
  SequenceKv kv(4);
  ASSERT_TRUE(kv.reserve(pool, 32));
  kv.advance(32);
  std::vector<kernels::AttentionScore> scores(32, 0);
  const std::pair<int, std::vector<int>> pages[] = {{1, {90, 0, 90, 0}}, {2, {0, 90, 0, 90}},
                                                    {3, {90, 90, 0, 0}}, {4, {0, 0, 0, 0}},
                                                    {5, {50, 50, 0, 0}}, {6, {100, 100, 100, 100}}};
  for (const auto& [page, values] : pages)
    for (int j = 0; j < 4; ++j) scores[page * 4 + j] = values[j];
  const auto h2o = EvictionPolicy::h2o(4, 4, 16, ScoreAggregation::kSum);
  // By score alone: the four lowest (page 4, 5, then 1 and 2 of the 180s).
  EXPECT_EQ(pages_to_evict(h2o, kv, scores), (std::vector{1, 2, 4, 5}));
  // Page 6 stays by score; KVCrush keeps one of 4, 5, 1, 2, 3 and drops the rest.
  const std::pair<KvCrushAnchor, int> kept[] = {{KvCrushAnchor::kZeros, 4},
                                                {KvCrushAnchor::kOnes, 1},
                                                {KvCrushAnchor::kAlternate, 2},
                                                {KvCrushAnchor::kMean, 3}};
  for (const auto& [anchor, page] : kept) {
    SCOPED_TRACE(std::string(to_string(anchor)));
    std::vector<int> want;
    for (int p : {1, 2, 3, 4, 5})
      if (p != page) want.push_back(p);
    EXPECT_EQ(pages_to_evict(h2o.with_kvcrush(1, anchor), kv, scores), want);
  }
  // The random anchor: four of those five, the same four every time.
  const auto random = h2o.with_kvcrush(1, KvCrushAnchor::kRandom);
  const std::vector<int> once = pages_to_evict(random, kv, scores);
  EXPECT_EQ(once.size(), 4u);
  EXPECT_EQ(std::ranges::count(once, 6), 0);
  EXPECT_EQ(pages_to_evict(random, kv, scores), once);
  // A budget of the whole area: nothing stays by score. Zeros orders the six
  // 4 (0), 1 2 3 5 (2), 6 (4); ranks 0 and 3 stay: pages 4 and 3.
  const auto whole =
      EvictionPolicy::h2o(4, 4, 16, ScoreAggregation::kSum).with_kvcrush(2, KvCrushAnchor::kZeros);
  EXPECT_EQ(pages_to_evict(whole, kv, scores), (std::vector{1, 2, 5, 6}));
  kv.release(pool);
}

// SnapKV: the prompt is scored by its last W queries, so the evictor says
// where scoring starts, and norm_sum divides by the queries that scored.
TEST(EvictionPolicyTest, SnapKvScoresFromThePromptsLastQueries) {
  const auto h2o = EvictionPolicy::h2o(4, 4, 12);
  EXPECT_EQ(KvEvictor(h2o, 64, 20).scores_from(), 0);
  EXPECT_EQ(KvEvictor(h2o.with_snapkv(8), 64, 20).scores_from(), 12);
  EXPECT_EQ(KvEvictor(h2o.with_snapkv(32), 64, 20).scores_from(), 0);

  tiers::BlockPool pool(64, 16);
  SequenceKv kv(4);
  ASSERT_TRUE(kv.reserve(pool, 16));
  kv.advance(16);
  std::vector<kernels::AttentionScore> scores(16, 0);
  for (int t = 4; t < 8; ++t) scores[t] = 10;  // page 1
  for (int t = 8; t < 12; ++t) scores[t] = 8;  // page 2
  // Every query scored: page 1's sums came from 12..9 queries, page 2's
  // from 8..5, so page 1 is the weaker. Only queries 12..15 scored: both
  // pages were seen by all four, and page 2 is.
  EXPECT_EQ(pages_to_evict(h2o, kv, scores), (std::vector{1}));
  EXPECT_EQ(pages_to_evict(h2o, kv, scores, 12), (std::vector{2}));
  kv.release(pool);
}

TEST(EvictionPolicyTest, EvictorKeepsScoresOnlyForH2o) {
  KvEvictor window(EvictionPolicy::sliding_window(8), 64);
  EXPECT_EQ(window.scores(), nullptr);
  KvEvictor h2o(EvictionPolicy::h2o(16, 16, 48), 64);
  ASSERT_NE(h2o.scores(), nullptr);
  EXPECT_EQ(h2o.score_view().size(), 64u);
  h2o.scores()[3] = 7;
  h2o.reset();
  EXPECT_EQ(h2o.score_view()[3], 0);
}

TEST(EvictionPolicyTest, EffectiveTokensOfTheFullCacheAndThePrompt) {
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::none(), 10, 100, 16), 112);
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::none(), 10, 10, 16), 16);
  // A long prompt is never evicted while it is prefilled.
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::sliding_window(16), 100, 200, 16), 112);
  // Window 16 at page 16: the window's page(s) and the page being written.
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::sliding_window(16), 1, 200, 16), 32);
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::sliding_window(8), 1, 200, 16), 32);
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::sliding_window(48), 1, 200, 16), 64);
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::h2o(16, 16, 64), 1, 200, 16), 80);
  // Never more than the full cache.
  EXPECT_EQ(effective_kv_tokens(EvictionPolicy::h2o(16, 16, 64), 1, 40, 16), 48);
}

// ---- generate() with a policy, on the bundled model.

std::vector<int> prompt_tokens(const char* text) {
  return test_util::bundled_model().tokenizer->encode(text).value();
}

Generation run(const EvictionPolicy& policy, std::span<const int> prompt, int max_tokens,
               int blocks, int prefill_chunk = 0) {
  auto& bundled = test_util::bundled_model();
  tiers::BlockPool pool(bundled.model.kv_layout(16).block_bytes(), blocks);
  GenerateOptions options;
  options.max_tokens = max_tokens;
  options.eviction = policy;
  options.prefill_chunk = prefill_chunk;
  auto out = generate(bundled.model, pool, nullptr, prompt, options);
  EXPECT_TRUE(out.has_value()) << policy.to_string() << ": " << out.error();
  EXPECT_EQ(pool.num_free(), pool.num_blocks());
  return out.value_or(Generation{});
}

const EvictionPolicy kPolicies[] = {
    EvictionPolicy::sliding_window(8),
    EvictionPolicy::sliding_window(32),
    EvictionPolicy::sliding_window(28, 4),
    EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kSum),
    EvictionPolicy::h2o(16, 16, 64, ScoreAggregation::kNormSum),
};

// The budget both ways: a pool of exactly effective_kv_tokens() runs the
// whole generation (eviction frees what the bound assumes) and the run
// really holds that many at its peak (the bound is not loose); one page
// fewer is not enough.
TEST(EvictionPolicyTest, GenerateHoldsExactlyTheEffectiveTokens) {
  const auto prompt = prompt_tokens("Q: What is the meaning of life?\nA: ");
  const int P = 16, max_tokens = 150;
  const int positions = static_cast<int>(prompt.size()) + max_tokens - 1;
  for (const EvictionPolicy& policy : kPolicies) {
    const int budget = effective_kv_tokens(policy, static_cast<int>(prompt.size()), positions, P);
    const Generation g = run(policy, prompt, max_tokens, budget / P);
    EXPECT_EQ(g.tokens.size(), static_cast<std::size_t>(max_tokens)) << policy.to_string();
    EXPECT_EQ(g.peak_kv_blocks * P, budget) << policy.to_string();
    EXPECT_GT(g.evicted_blocks, 0) << policy.to_string();

    auto& bundled = test_util::bundled_model();
    tiers::BlockPool small(bundled.model.kv_layout(P).block_bytes(), budget / P - 1);
    GenerateOptions options;
    options.max_tokens = max_tokens;
    options.eviction = policy;
    auto out = generate(bundled.model, small, nullptr, prompt, options);
    ASSERT_FALSE(out.has_value()) << policy.to_string();
    EXPECT_TRUE(contains(out.error(), "no free block"));
    EXPECT_EQ(small.num_free(), small.num_blocks());
  }
}

// With a policy, tokens are still a function of the request: the same on a
// second run and whatever the prefill chunking (no eviction happens inside
// the prompt, and H2O's integer scores ignore the chunking).
TEST(EvictionPolicyTest, GenerateIsDeterministicAndIgnoresPrefillChunking) {
  const auto prompt =
      prompt_tokens("The best way to predict the future is to invent it. Or so they say, anyway; ");
  for (const EvictionPolicy& policy : kPolicies) {
    const Generation whole = run(policy, prompt, 100, 64);
    EXPECT_EQ(run(policy, prompt, 100, 64).tokens, whole.tokens) << policy.to_string();
    for (int chunk : {1, 7})
      EXPECT_EQ(run(policy, prompt, 100, 64, chunk).tokens, whole.tokens)
          << policy.to_string() << " chunk " << chunk;
  }
}

// A policy that never has anything to evict is the full cache, exactly.
TEST(EvictionPolicyTest, NothingEvictedMeansTheFullCacheTokens) {
  const auto prompt = prompt_tokens("Q: Why is the sky blue?\nA: ");
  const Generation full = run(EvictionPolicy::none(), prompt, 100, 64);
  const Generation wide = run(EvictionPolicy::sliding_window(256), prompt, 100, 64);
  const Generation roomy = run(EvictionPolicy::h2o(0, 16, 256), prompt, 100, 64);
  EXPECT_EQ(wide.tokens, full.tokens);
  EXPECT_EQ(roomy.tokens, full.tokens);
  EXPECT_EQ(wide.evicted_blocks, 0);
  EXPECT_EQ(full.peak_kv_blocks, wide.peak_kv_blocks);
}

}  // namespace
}  // namespace kvtier
