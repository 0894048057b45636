#include "kernels/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

TEST(Rotary, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_bf16(-0.3f), -0.30078125f);  // 1.0011001|1001... rounds up
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
}

TEST(Rotary, RotatesHalvesByMinusThetaAndKeepsTheNorm) {
  const int D = 16, positions = 50;
  for (bool bf16 : {false, true}) {
    RotaryTable table(D, 10000.0f, positions, bf16);
    EXPECT_EQ(table.cos(0)[3], 1.0f);
    EXPECT_EQ(table.sin(0)[3], 0.0f);
    // Pair j = 0 turns by pos radians: cos(7), sin(7), rounded as asked.
    const float c = static_cast<float>(std::cos(7.0)), s = static_cast<float>(std::sin(7.0));
    EXPECT_EQ(table.cos(7)[0], bf16 ? round_to_bf16(c) : c);
    EXPECT_EQ(table.sin(7)[0], bf16 ? round_to_bf16(s) : s);

    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    std::vector<float> x(2 * D);
    for (float& v : x) v = normal(rng);
    std::vector<float> y = x;
    table.apply(y.data(), 2, 7);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < D / 2; ++j) {
        const float x1 = x[h * D + j], x2 = x[h * D + j + D / 2];
        EXPECT_FLOAT_EQ(y[h * D + j], x1 * table.cos(7)[j] + x2 * table.sin(7)[j]);
        EXPECT_FLOAT_EQ(y[h * D + j + D / 2], x2 * table.cos(7)[j] - x1 * table.sin(7)[j]);
      }
    if (!bf16) {
      double before = 0, after = 0;
      for (int i = 0; i < 2 * D; ++i) before += double(x[i]) * x[i], after += double(y[i]) * y[i];
      EXPECT_NEAR(after, before, 1e-4);
    }
  }
}

// Rotary's point: q . k after rotation depends on the positions' difference.
TEST(Rotary, DotProductsDependOnTheDistanceOnly) {
  const int D = 32;
  RotaryTable table(D, 100000.0f, 200, false);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> q(D), k(D);
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = normal(rng);
  auto rotated_dot = [&](int pq, int pk) {
    std::vector<float> a = q, b = k;
    table.apply(a.data(), 1, pq);
    table.apply(b.data(), 1, pk);
    double dot = 0;
    for (int i = 0; i < D; ++i) dot += double(a[i]) * b[i];
    return dot;
  };
  EXPECT_NEAR(rotated_dot(10, 3), rotated_dot(150, 143), 1e-3);
  EXPECT_GT(std::abs(rotated_dot(10, 3) - rotated_dot(10, 9)), 1e-3) << "distance matters";
}

}  // namespace
}  // namespace kvtier::kernels
