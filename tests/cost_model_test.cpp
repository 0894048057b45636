#include "engine/cost_model.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier {
namespace {

TEST(CostModelTest, NoSampleMeansAlwaysLoad) {
  const TierCosts c = CostModel().costs();
  EXPECT_EQ(c.prefill_per_token_s, 0);
  EXPECT_EQ(c.l3_latency_s, 0);
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
  m.add_l3(100e-6, 10e-6);
  m.add_l3(300e-6, 30e-6);
  EXPECT_DOUBLE_EQ(m.costs().l3_latency_s, 200e-6);
  EXPECT_DOUBLE_EQ(m.costs().l3_per_block_s, 20e-6);
  EXPECT_EQ(m.costs().l3_samples, 2);
}

TEST(CostModelTest, SamplesThatAreNoMeasurementAreIgnored) {
  CostModel m;
  m.add_prefill(0, 10);
  m.add_prefill(1, 0);
  m.add_prefill(-1, 10);
  m.add_l2_block(-1);
  m.add_l3(std::numeric_limits<double>::infinity(), 1);
  const TierCosts c = m.costs();
  EXPECT_EQ(c.prefill_samples + c.l2_samples + c.l3_samples, 0);
}

TEST(CostModelTest, PinnedFiguresIgnoreLaterSamples) {
  CostModel m;
  m.add_prefill(1, 100);
  TierCosts staged;
  staged.l3_latency_s = 10;
  m.pin(staged);
  m.add_prefill(2, 100);
  m.add_l3(1e-6, 1e-6);
  EXPECT_EQ(m.costs().prefill_per_token_s, 0);
  EXPECT_EQ(m.costs().l3_latency_s, 10);
}

}  // namespace
}  // namespace kvtier
