#include "engine/cache/cost_model.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace kvtier {
namespace {

constexpr int kPage = 16;

// A curve as staged figures: (rows, seconds) points.
TierCosts staged(std::vector<PassCost> curve) {
  TierCosts c;
  c.prefill = std::move(curve);
  return c;
}

// Per-row cost of the point of `rows` in m's curve (0 when absent).
double per_row_at(const CostModel& m, int rows) {
  for (const PassCost& p : m.costs().prefill)
    if (p.rows == rows) return p.seconds / p.rows;
  return 0;
}

TEST(CostModelTest, NoSampleMeansAlwaysLoad) {
  const CostModel m;
  const TierCosts& c = m.costs();
  EXPECT_TRUE(c.prefill.empty());
  EXPECT_EQ(c.load[Tier::kL3].latency_s, 0);
  EXPECT_EQ(c.prefill_samples(), 0);
  EXPECT_EQ(c.pass_seconds(100), 0);
  const RunPlan plan = m.plan({.blocks = 63, .reads = 63, .splittable = 63, .suffix_tokens = 16},
                              kPage, {.chunk = 1024});
  EXPECT_EQ(plan.recompute, 0) << "no prefill figure: load";
}

// One measurement on a busy machine once ruled for the daemon's life.
TEST(CostModelTest, AWildSampleIsOutvotedAndTheWindowForgetsIt) {
  CostModel m;
  m.add_prefill(50.0, 1000);  // 50 ms a row: a start-up on a machine busy elsewhere
  EXPECT_DOUBLE_EQ(per_row_at(m, 1000), 0.05);
  m.add_prefill(0.016, 1000);
  m.add_prefill(0.020, 1000);
  EXPECT_DOUBLE_EQ(per_row_at(m, 1000), 20e-6) << "the median of three";
  for (std::size_t i = 0; i < CostModel::kWindow; ++i) m.add_prefill(0.030, 1000);
  EXPECT_DOUBLE_EQ(per_row_at(m, 1000), 30e-6);
  EXPECT_EQ(m.costs().prefill_samples(), static_cast<int>(CostModel::kWindow));
}

// Passes of 16 and of 1024 rows are different figures: the old single
// figure, measured at 64 rows, fit neither on a GPU.
TEST(CostModelTest, EachSizeClassOfPassHasAPointOfItsOwn) {
  CostModel m;
  m.add_prefill(3.5e-3, 16);
  m.add_prefill(19.4e-3, 1024);
  m.add_prefill(3.6e-3, 20);  // the class of 16..31: its median rows and cost per row
  m.add_prefill(3.4e-3, 16);
  const std::vector<PassCost>& curve = m.costs().prefill;
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_EQ(curve[0].rows, 16);
  EXPECT_EQ(curve[0].samples, 3);
  // Per row: 219, 180 and 213 us; the median, 213, times the median rows.
  EXPECT_DOUBLE_EQ(curve[0].seconds, 16 * (3.4e-3 / 16));
  EXPECT_EQ(curve[1].rows, 1024);
  EXPECT_DOUBLE_EQ(curve[1].seconds, 19.4e-3);
}

TEST(CostModelTest, APassIsReadOffTheCurve) {
  const TierCosts c = staged({{16, 0.010, 1}, {64, 0.020, 1}, {256, 0.060, 1}});
  EXPECT_DOUBLE_EQ(c.pass_seconds(16), 0.010);
  EXPECT_DOUBLE_EQ(c.pass_seconds(40), 0.015) << "on the line between 16 and 64";
  EXPECT_DOUBLE_EQ(c.pass_seconds(160), 0.040);
  EXPECT_DOUBLE_EQ(c.pass_seconds(4), 0.010) << "below the first point: its cost";
  EXPECT_DOUBLE_EQ(c.pass_seconds(512), 0.120) << "beyond the last: its cost per row";
  // 100 tokens in passes of 40 beside 8 decodes: 48 + 48 + 28 rows.
  EXPECT_DOUBLE_EQ(c.prefill_seconds(100, {.chunk = 40, .beside = 8}),
                   2 * c.pass_seconds(48) + c.pass_seconds(28));
  EXPECT_DOUBLE_EQ(c.prefill_seconds(0, {.chunk = 40}), 0);
  EXPECT_DOUBLE_EQ(c.prefill_seconds(10, {.chunk = 0}), 10 * c.pass_seconds(1))
      << "a chunk of 0 is taken as 1, never a division by zero";
}

TEST(CostModelTest, TheMedianOfAnEvenCountIsBetweenTheMiddleTwo) {
  CostModel m;
  m.add_load(Tier::kL3, 100e-6, 10e-6);
  m.add_load(Tier::kL3, 300e-6, 30e-6);
  EXPECT_DOUBLE_EQ(m.costs().load[Tier::kL3].latency_s, 200e-6);
  EXPECT_DOUBLE_EQ(m.costs().load[Tier::kL3].per_block_s, 20e-6);
  EXPECT_EQ(m.costs().load[Tier::kL3].samples, 2);
  EXPECT_EQ(m.costs().load[Tier::kL2].samples, 0) << "each tier has its own figures";
}

TEST(CostModelTest, SamplesThatAreNoMeasurementAreIgnored) {
  CostModel m;
  m.add_prefill(0, 10);
  m.add_prefill(1, 0);
  m.add_prefill(-1, 10);
  m.add_prefill(std::numeric_limits<double>::infinity(), 10);
  m.add_load(Tier::kL2, 0, -1);
  m.add_load(Tier::kL3, std::numeric_limits<double>::infinity(), 1);
  const TierCosts c = m.costs();
  EXPECT_EQ(c.prefill_samples() + c.load[Tier::kL2].samples + c.load[Tier::kL3].samples, 0);
}

// The H200 figures: a 1024-row pass 19.4 ms, a 16-row one 3.5 ms,
// 63 blocks from L3 in 45 ms. At a budget of 16 the recompute is 64 small
// passes and loading wins; at 1024 it is one pass and recomputing wins.
TEST(CostModelTest, TheDecisionWeighsThePassesTheBudgetAllows) {
  CostModel m;
  TierCosts k = staged({{16, 3.5e-3, 1}, {1024, 19.4e-3, 1}});
  k.load[Tier::kL3] = {1e-3, 0.7e-3, 1};
  m.pin(k);
  const CachedRun run{.blocks = 63, .reads = 63, .splittable = 0, .suffix_tokens = 16};
  const RunPlan small = m.plan(run, kPage, {.chunk = 16});
  EXPECT_EQ(small.recompute, 0) << "64 passes of 16 cost more than the load";
  EXPECT_NEAR(small.load_s, 1e-3 + 63 * 0.7e-3 + 3.5e-3, 1e-12);
  const RunPlan large = m.plan(run, kPage, {.chunk = 1024});
  EXPECT_EQ(large.recompute, 63) << "one pass of 1024 beats a 45 ms load";
  EXPECT_NEAR(large.wait_s, 19.4e-3, 1e-12);
  EXPECT_LT(large.wait_s, large.load_s);
}

// A short run is not worth a read's fixed latency; a long one is.
TEST(CostModelTest, ReadsHaveAFixedLatency) {
  CostModel m;
  TierCosts k = staged({{16, 160e-6, 1}, {1024, 10e-3, 1}});  // about 10 us a row
  k.load[Tier::kL3] = {1e-3, 10e-6, 1};
  m.pin(k);
  EXPECT_EQ(m.plan({.blocks = 1, .reads = 1, .suffix_tokens = 1}, kPage, {.chunk = 1024}).recompute,
            1)
      << "1010 us to load, a few hundred to compute";
  EXPECT_EQ(
      m.plan({.blocks = 60, .reads = 60, .suffix_tokens = 1}, kPage, {.chunk = 1024}).recompute, 0)
      << "1.6 ms to load, about 10 ms to compute";
  EXPECT_EQ(m.plan({.tier = Tier::kL2, .blocks = 1, .reads = 1, .suffix_tokens = 1}, kPage,
                   {.chunk = 1024})
                .recompute,
            0)
      << "L2 has no figure of its own: loading is free";
}

// When loading and recomputing cost about the same, the front is recomputed
// while the rest loads, split where both finish together.
TEST(CostModelTest, CloseCostsSplitTheRun) {
  CostModel m;
  TierCosts k = staged({{16, 16e-3, 1}, {128, 128e-3, 1}});  // 1 ms a row
  k.load[Tier::kL3] = {0, 16e-3, 1};  // 16 ms a block: as slow as a block's prefill
  m.pin(k);
  const CachedRun run{.blocks = 32, .reads = 32, .splittable = 32, .suffix_tokens = 16};
  const RunPlan plan = m.plan(run, kPage, {.chunk = 128});
  EXPECT_NEAR(plan.load_s, (32 * 16 + 16) * 1e-3, 1e-9);
  EXPECT_NEAR(plan.recompute_s, (32 * 16 + 16) * 1e-3, 1e-9);
  EXPECT_EQ(plan.recompute, 16) << "half recomputed, half loaded";
  EXPECT_NEAR(plan.wait_s, (16 * 16 + 16) * 1e-3, 1e-9);
  EXPECT_GE(std::min(plan.load_s, plan.recompute_s) / plan.wait_s, 1.8);

  const RunPlan whole = m.plan({.blocks = 32, .reads = 32, .splittable = 0, .suffix_tokens = 16},
                               kPage, {.chunk = 128});
  EXPECT_TRUE(whole.recompute == 0 || whole.recompute == 32) << "not splittable: one or the other";
  // Blocks already on their way cost no read: the front need not be
  // recomputed to save time on them.
  const RunPlan landing = m.plan({.blocks = 32, .reads = 2, .splittable = 2, .suffix_tokens = 16},
                                 kPage, {.chunk = 128});
  EXPECT_EQ(landing.recompute, 1);
}

// The invariant, on random staged figures: the plan is never expected to
// wait longer than recomputing the run (nor so than a cold prefill of the
// whole prompt, which recomputes more), and a split never longer than
// either pure plan.
TEST(CostModelTest, APlanNeverWaitsLongerThanRecomputing) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    // An increasing, concave-ish curve: a fixed cost plus a cost per row.
    const double fixed = 1e-3 * u(rng), per_row = 1e-4 * u(rng) + 1e-7;
    std::vector<PassCost> curve;
    for (int rows = 16; rows <= 1024; rows *= 2)
      curve.push_back({rows, fixed + per_row * rows * (0.8 + 0.4 * u(rng)), 1});
    TierCosts k = staged(curve);
    k.load[Tier::kL3] = {0.05 * u(rng), 0.01 * u(rng), 1};
    CostModel m;
    m.pin(k);
    const int blocks = 1 + static_cast<int>(u(rng) * 63);
    const int reads = static_cast<int>(u(rng) * (blocks + 1));
    const int splittable = std::min(reads, static_cast<int>(u(rng) * (blocks + 1)));
    const CachedRun run{.blocks = blocks,
                        .reads = reads,
                        .splittable = splittable,
                        .suffix_tokens = 1 + static_cast<int>(u(rng) * 200)};
    const int head = static_cast<int>(u(rng) * 10) * kPage;
    const PrefillShape shape{.chunk = 1 + static_cast<int>(u(rng) * 1024),
                             .beside = static_cast<int>(u(rng) * 8)};
    const RunPlan plan = m.plan(run, kPage, shape);
    const double cold = m.costs().prefill_seconds(head + blocks * kPage + run.suffix_tokens, shape);
    ASSERT_LE(plan.wait_s, plan.recompute_s) << "trial " << trial;
    ASSERT_LE(plan.wait_s, plan.load_s) << "trial " << trial;
    ASSERT_LE(plan.wait_s, cold * (1 + 1e-12)) << "trial " << trial;
    ASSERT_GE(plan.recompute, 0);
    ASSERT_LE(plan.recompute, blocks);
    if (plan.recompute > 0 && plan.recompute < blocks) {
      ASSERT_LE(plan.recompute, splittable);
    }
  }
}

TEST(CostModelTest, PinnedFiguresIgnoreLaterSamplesAndAreMadeSafe) {
  CostModel m;
  m.add_prefill(1, 100);
  TierCosts k;
  k.load[Tier::kL3].latency_s = 10;
  // Unsorted, a duplicate size, a zero size and a zero time.
  k.prefill = {{64, 0.2, 1}, {0, 1, 1}, {16, 0.1, 1}, {64, 0.3, 1}, {32, 0, 1}};
  m.pin(k);
  m.add_prefill(2, 100);
  m.add_load(Tier::kL3, 1e-6, 1e-6);
  const std::vector<PassCost>& curve = m.costs().prefill;
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_EQ(curve[0].rows, 16);
  EXPECT_EQ(curve[1].rows, 64);
  EXPECT_EQ(m.costs().load[Tier::kL3].latency_s, 10);
  EXPECT_GT(m.costs().pass_seconds(40), 0.1);
  EXPECT_EQ(prefill_curve_text({}), "none");
  EXPECT_EQ(prefill_curve_text(curve), "16 rows 6250.0 us/row (1), 64 rows 3125.0 us/row (1)");
}

}  // namespace
}  // namespace kvtier
