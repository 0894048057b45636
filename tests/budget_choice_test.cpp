#include "engine/scheduling/budget_choice.h"

#include <gtest/gtest.h>

#include "engine/scheduling/scheduler.h"
#include "test_util.h"

namespace kvtier {
namespace {

using test_util::contains;

// GPT-2 124M on this project's 2-core CPU (median pass, ms by rows), and
// what a row's attention over one more cached key adds (0.7 us).
const PassSweep kCpu = {{{16, 31.5e-3, 3},
                         {32, 62.5e-3, 3},
                         {64, 102.3e-3, 3},
                         {128, 183.2e-3, 3},
                         {256, 344.8e-3, 3},
                         {512, 695.7e-3, 1},
                         {1024, 1553.6e-3, 1}},
                        0.7e-6,
                        1024};
// The same model on an H200 (16 rows 3.5 ms, 1024 rows 19.4 ms).
const PassSweep kGpu = {{{16, 3.5e-3, 3},
                         {32, 3.6e-3, 3},
                         {64, 3.8e-3, 3},
                         {128, 4.3e-3, 3},
                         {256, 6.0e-3, 3},
                         {512, 11.5e-3, 3},
                         {1024, 19.4e-3, 3}},
                        0.01e-6,
                        1024};

SchedulerConfig automatic(int max_batch_size = 8) {
  SchedulerConfig c;
  c.token_budget = SchedulerConfig::kAuto;
  c.max_batch_size = max_batch_size;
  return c;
}

TEST(BudgetChoiceTest, SweepSizesArePowersOfTwoUpToTheLimit) {
  EXPECT_EQ(sweep_sizes(1024), (std::vector<int>{16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(sweep_sizes(300), (std::vector<int>{16, 32, 64, 128, 256}));
  EXPECT_EQ(sweep_sizes(8), (std::vector<int>{8}));
  EXPECT_TRUE(sweep_sizes(0).empty());
}

// On the CPU a fresh pass costs least per row at 256 rows, but a 1024-token
// prompt in passes of 1024 costs least (each smaller pass attends to the
// ones before it: 0.7 us a row and key); 512 is 1.4% above it.
// Beside 8 decodes, the chunk that keeps the last pass of a 1024-token
// prompt within 3x their step alone, its attention included.
TEST(BudgetChoiceTest, TheCpuGetsThePassNearTheBestAndAChunkThatSparesDecodes) {
  const BudgetChoice c = resolve_budgets(automatic(), kCpu);
  EXPECT_TRUE(c.automatic);
  EXPECT_EQ(c.token_budget, 1024);
  TierCosts curve;
  curve.prefill = kCpu.passes;
  const double alone = curve.pass_seconds(8);
  auto beside = [&](int chunk) {
    return curve.pass_seconds(8 + chunk) + kCpu.seconds_per_row_key * chunk * 1024;
  };
  EXPECT_LE(beside(c.mixed_prefill_tokens), kItlStretch * alone);
  EXPECT_GT(beside(c.mixed_prefill_tokens + 1), kItlStretch * alone) << "the largest such chunk";
  EXPECT_GT(c.mixed_prefill_tokens, 16);
  EXPECT_LT(curve.pass_seconds(8 + c.mixed_prefill_tokens), kItlStretch * alone * 0.9)
      << "the attention at the end of the context is counted";
  EXPECT_TRUE(contains(c.why,
                       "token_budget 1024: a 1024-token prompt in passes of 1024 rows costs 1517 "
                       "us a row, the least"))
      << c.why;
  EXPECT_TRUE(contains(c.why, "of passes of 16 to 1024 rows (16: 2322 us a row)")) << c.why;
  EXPECT_TRUE(contains(c.why, "the last " + std::to_string(c.mixed_prefill_tokens) +
                                  " tokens of a 1024-token prompt"))
      << c.why;

  // With 512 rows within 1% of the least, the smaller pass.
  PassSweep close = kCpu;
  close.passes[5].seconds = 512 * 1.345e-3;
  const BudgetChoice smaller = resolve_budgets(automatic(), close);
  EXPECT_EQ(smaller.token_budget, 512);
  EXPECT_TRUE(contains(smaller.why, "within 1% of the least (1517 us a row in passes of 1024)"))
      << smaller.why;
  // Without the attention figure, fresh passes alone: 256 is the least.
  PassSweep fresh = kCpu;
  fresh.seconds_per_row_key = 0;
  EXPECT_EQ(resolve_budgets(automatic(), fresh).token_budget, 256);
}

// On the GPU the cost per row falls to the last size measured.
TEST(BudgetChoiceTest, TheGpuGetsLargePasses) {
  const BudgetChoice c = resolve_budgets(automatic(), kGpu);
  EXPECT_EQ(c.token_budget, 1024);
  EXPECT_GE(c.mixed_prefill_tokens, 200);
}

TEST(BudgetChoiceTest, AnExplicitSettingWins) {
  SchedulerConfig set = automatic();
  set.token_budget = 32;
  BudgetChoice c = resolve_budgets(set, kCpu);
  EXPECT_FALSE(c.automatic);
  EXPECT_EQ(c.token_budget, 32);
  EXPECT_EQ(c.mixed_prefill_tokens, 32) << "no cap of its own beside an explicit budget";
  set.mixed_prefill_tokens = 12;
  EXPECT_EQ(resolve_budgets(set, kCpu).mixed_prefill_tokens, 12);
  SchedulerConfig mixed_only = automatic();
  mixed_only.mixed_prefill_tokens = 20;
  c = resolve_budgets(mixed_only, kCpu);
  EXPECT_EQ(c.token_budget, 1024);
  EXPECT_EQ(c.mixed_prefill_tokens, 20);
}

TEST(BudgetChoiceTest, TheBudgetHoldsTheBatchAndASweeplessStartFallsBack) {
  EXPECT_EQ(resolve_budgets(automatic(2048), kCpu).token_budget, 2048)
      << "every running request decodes each step";
  const BudgetChoice none = resolve_budgets(automatic(), {});
  EXPECT_EQ(none.token_budget, 16);
  EXPECT_EQ(none.mixed_prefill_tokens, 16);
  EXPECT_TRUE(contains(none.why, "no pass could be measured"));
  EXPECT_EQ(resolve_budgets(automatic(64), {}).token_budget, 64);
}

}  // namespace
}  // namespace kvtier
