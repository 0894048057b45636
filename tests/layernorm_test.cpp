// LayerNorm (kernels/layernorm.h) against a double-precision evaluation of
// its definition, in place, without a bias, and a row alone against the same
// row in a batch.
#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

constexpr float kEps = 1e-5f;

std::vector<float> random_floats(std::size_t n, unsigned seed, float sd, float mean) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

TEST(LayerNorm, MatchesItsDefinition) {
  const int M = 5, C = 768;
  const auto x = random_floats(static_cast<std::size_t>(M) * C, 1, 2.0f, 3.0f);
  const auto w = random_floats(C, 2, 0.5f, 1.0f), b = random_floats(C, 3, 0.1f, 0.0f);
  std::vector<float> out(x.size());
  layernorm(out.data(), x.data(), w.data(), b.data(), M, C, kEps);
  for (int m = 0; m < M; ++m) {
    const float* r = x.data() + m * C;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < C; ++i) mean += r[i];
    mean /= C;
    for (int i = 0; i < C; ++i) var += (r[i] - mean) * (r[i] - mean);
    var /= C;
    for (int i = 0; i < C; ++i) {
      const double want = (r[i] - mean) / std::sqrt(var + kEps) * w[i] + b[i];
      ASSERT_NEAR(out[m * C + i], want, 2e-6 + 2e-6 * std::fabs(want)) << m << "," << i;
    }
  }
}

TEST(LayerNorm, InPlaceAndRowAloneGiveTheSameBits) {
  const int M = 9, C = 100, row = 6;
  const auto x = random_floats(static_cast<std::size_t>(M) * C, 4, 1.0f, -1.0f);
  const auto w = random_floats(C, 5, 0.5f, 1.0f), b = random_floats(C, 6, 0.1f, 0.0f);
  std::vector<float> out(x.size()), one(C);
  layernorm(out.data(), x.data(), w.data(), b.data(), M, C, kEps);
  auto in_place = x;
  layernorm(in_place.data(), in_place.data(), w.data(), b.data(), M, C, kEps);
  EXPECT_EQ(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)), 0);
  layernorm(one.data(), x.data() + row * C, w.data(), b.data(), 1, C, kEps);
  EXPECT_EQ(std::memcmp(one.data(), out.data() + row * C, C * sizeof(float)), 0);
}

TEST(LayerNorm, NullBiasIsNoBias) {
  const int C = 64;
  const auto x = random_floats(C, 7, 1.0f, 0.0f), w = random_floats(C, 8, 0.5f, 1.0f);
  std::vector<float> without(C), expect(C);
  layernorm(without.data(), x.data(), w.data(), nullptr, 1, C, kEps);
  double mean = 0.0, var = 0.0;
  for (float v : x) mean += v;
  mean /= C;
  for (float v : x) var += (v - mean) * (v - mean);
  const float mu = static_cast<float>(mean);
  const float rstd = static_cast<float>(1.0 / std::sqrt(var / C + kEps));
  for (int i = 0; i < C; ++i) EXPECT_EQ(without[i], (x[i] - mu) * rstd * w[i]) << i;
}

TEST(LayerNorm, ConstantRowNormalisesToTheBias) {
  const int C = 32;
  const std::vector<float> x(C, 4.25f), w(C, 3.0f), b(C, 0.5f);
  std::vector<float> out(C);
  layernorm(out.data(), x.data(), w.data(), b.data(), 1, C, kEps);
  for (float v : out) EXPECT_EQ(v, 0.5f);
}

}  // namespace
}  // namespace kvtier::kernels
