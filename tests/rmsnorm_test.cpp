#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

TEST(RmsNorm, GivesUnitRootMeanSquareAndEachRowAlone) {
  const int rows = 5, C = 37;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> x(rows * C), y(x.size());
  for (float& v : x) v = normal(rng);
  rmsnorm(y.data(), x.data(), rows, C);
  for (int r = 0; r < rows; ++r) {
    double ms = 0, ms_in = 0;
    for (int i = 0; i < C; ++i) ms += double(y[r * C + i]) * y[r * C + i];
    for (int i = 0; i < C; ++i) ms_in += double(x[r * C + i]) * x[r * C + i];
    EXPECT_NEAR(ms / C, 1.0, 1e-5);
    const double scale = 1.0 / std::sqrt(ms_in / C + kRmsNormEps);
    for (int i = 0; i < C; ++i) EXPECT_NEAR(y[r * C + i], x[r * C + i] * scale, 1e-6);
    std::vector<float> alone(C);
    rmsnorm(alone.data(), x.data() + r * C, 1, C);
    EXPECT_EQ(0, std::memcmp(alone.data(), y.data() + r * C, sizeof(float) * C));
  }
  // In place, and over strided heads, the same bits.
  std::vector<float> strided(rows * (C + 3), 9.0f);
  for (int r = 0; r < rows; ++r) std::memcpy(&strided[r * (C + 3)], &x[r * C], sizeof(float) * C);
  rmsnorm_strided(strided.data(), rows, C, C + 3);
  rmsnorm(x.data(), x.data(), rows, C);
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(0, std::memcmp(&strided[r * (C + 3)], &y[r * C], sizeof(float) * C));
    EXPECT_EQ(strided[r * (C + 3) + C], 9.0f) << "the gap between rows is left alone";
  }
  EXPECT_EQ(x, y);
}

TEST(RmsNorm, AZeroRowStaysZero) {
  std::vector<float> x(8, 0.0f);
  rmsnorm(x.data(), x.data(), 1, 8);
  for (float v : x) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kvtier::kernels
