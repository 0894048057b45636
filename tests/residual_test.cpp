// The residual add (kernels/residual.h): out = a + b, also in place.
#include "kernels/residual.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::kernels {
namespace {

std::vector<float> ramp(int n, float scale) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(scale * static_cast<float>(i) - 3.0f);
  return v;
}

TEST(Residual, AddsElementByElement) {
  const int n = 37;  // not a multiple of any vector width
  const auto a = ramp(n, 0.5f), b = ramp(n, -0.25f);
  std::vector<float> out(n);
  residual_add(out.data(), a.data(), b.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]) << "element " << i;
}

TEST(Residual, InPlaceOverEitherInput) {
  const int n = 37;
  const auto a = ramp(n, 0.5f), b = ramp(n, 1e-3f);
  std::vector<float> want(n);
  residual_add(want.data(), a.data(), b.data(), n);
  auto x = a;  // the engine's x += y
  residual_add(x.data(), x.data(), b.data(), n);
  EXPECT_EQ(x, want);
  auto y = b;
  residual_add(y.data(), a.data(), y.data(), n);
  EXPECT_EQ(y, want);
}

TEST(Residual, ZeroLengthWritesNothing) {
  float out = 7.0f;
  residual_add(&out, nullptr, nullptr, 0);
  EXPECT_EQ(out, 7.0f);
}

}  // namespace
}  // namespace kvtier::kernels
