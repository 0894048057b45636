#include "kernels/rotary.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Cache rotation: a page of keys rotated at positions p moved by delta holds
// the keys rotated at p + delta, and moving them back restores them.
TEST(Rotary, ShiftedKeysAreTheKeysOfTheirNewPositionsAndShiftBack) {
  const int D = 16, heads = 2, P = 8, count = 6, from = 40, delta = -24;
  RotaryTable table(D, 10000.0f, 64, false);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  // Raw keys by position, then as a page (heads, D, P) rotated at from + p.
  std::vector<std::vector<float>> raw(count, std::vector<float>(heads * D));
  std::vector<float> page(static_cast<std::size_t>(heads) * D * P, 7.0f);
  auto to_page = [&](std::vector<float>& out, const std::vector<float>& key, int p) {
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < D; ++d) out[(h * D + d) * P + p] = key[h * D + d];
  };
  for (int p = 0; p < count; ++p) {
    for (float& v : raw[p]) v = normal(rng);
    std::vector<float> key = raw[p];
    table.apply(key.data(), heads, from + p);
    to_page(page, key, p);
  }
  const std::vector<float> original = page;
  table.shift_keys(page.data(), heads, P, count, delta);
  std::vector<float> expected(page.size(), 7.0f);  // positions >= count untouched
  for (int p = 0; p < count; ++p) {
    std::vector<float> key = raw[p];
    table.apply(key.data(), heads, from + p + delta);
    to_page(expected, key, p);
  }
  double moved = 0;
  for (std::size_t i = 0; i < page.size(); ++i) {
    EXPECT_NEAR(page[i], expected[i], 2e-5) << i;
    moved = std::max(moved, std::abs(double(page[i]) - original[i]));
  }
  EXPECT_GT(moved, 0.1) << "the keys turned";
  table.shift_keys(page.data(), heads, P, count, -delta);
  for (std::size_t i = 0; i < page.size(); ++i) EXPECT_NEAR(page[i], original[i], 1e-6) << i;
}

}  // namespace
}  // namespace kvtier::kernels
