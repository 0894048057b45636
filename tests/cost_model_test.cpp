#include "engine/cost_model.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier {
namespace {

TEST(CostModelTest, NoSampleMeansAlwaysLoad) {
  const TierCosts c = CostModel().costs();
  EXPECT_EQ(c.prefill_per_token_s, 0);
  EXPECT_EQ(c.load[Tier::kL3].latency_s, 0);
  EXPECT_EQ(c.prefill_samples, 0);
}

// One measurement on a busy machine once ruled for the daemon's life.
TEST(CostModelTest, AWildSampleIsOutvotedAndTheWindowForgetsIt) {
  CostModel m;
  m.add_prefill(50.0, 1000);  // 50 ms a token: a start-up on a machine busy elsewhere
  EXPECT_DOUBLE_EQ(m.costs().prefill_per_token_s, 0.05);
  m.add_prefill(0.016, 1000);
  m.add_prefill(0.020, 1000);
  EXPECT_DOUBLE_EQ(m.costs().prefill_per_token_s, 20e-6) << "the median of three";
  for (std::size_t i = 0; i < CostModel::kWindow; ++i) m.add_prefill(0.030, 1000);
  EXPECT_DOUBLE_EQ(m.costs().prefill_per_token_s, 30e-6);
  EXPECT_EQ(m.costs().prefill_samples, static_cast<int>(CostModel::kWindow));
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
  m.add_load(Tier::kL2, 0, -1);
  m.add_load(Tier::kL3, std::numeric_limits<double>::infinity(), 1);
  const TierCosts c = m.costs();
  EXPECT_EQ(c.prefill_samples + c.load[Tier::kL2].samples + c.load[Tier::kL3].samples, 0);
}

// Loading n blocks costs the tier's latency + n * its per-block figure;
// recomputing them n * page_size * prefill_per_token.
TEST(CostModelTest, TheLoadOrRecomputeCutUsesTheTiersOwnFigures) {
  CostModel m;
  EXPECT_TRUE(m.worth_loading(Tier::kL3, 1, 16)) << "no prefill figure: always load";
  m.add_prefill(10e-6 * 1000, 1000);  // 10 us a token: a block of 16 is 160 us
  m.add_load(Tier::kL3, 1e-3, 10e-6);
  EXPECT_FALSE(m.worth_loading(Tier::kL3, 1, 16)) << "1010 us to load, 160 us to compute";
  EXPECT_TRUE(m.worth_loading(Tier::kL3, 100, 16)) << "2 ms to load, 16 ms to compute";
  EXPECT_TRUE(m.worth_loading(Tier::kL2, 1, 16)) << "L2 has no figure of its own yet";
}

TEST(CostModelTest, PinnedFiguresIgnoreLaterSamples) {
  CostModel m;
  m.add_prefill(1, 100);
  TierCosts staged;
  staged.load[Tier::kL3].latency_s = 10;
  m.pin(staged);
  m.add_prefill(2, 100);
  m.add_load(Tier::kL3, 1e-6, 1e-6);
  EXPECT_EQ(m.costs().prefill_per_token_s, 0);
  EXPECT_EQ(m.costs().load[Tier::kL3].latency_s, 10);
}

}  // namespace
}  // namespace kvtier
