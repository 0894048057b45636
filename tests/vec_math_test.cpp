#include "kernels/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/gelu.h"

namespace kvtier::kernels {
namespace {

// Relative error of vexp against libm over the whole range softmax uses.
TEST(VecMath, ExpMatchesLibmWithinTwoUlp) {
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const float want = std::exp(x);
    const float got = vexp(x);
    ASSERT_NEAR(got, want, 2.5e-7f * want) << "x=" << x;
  }
  EXPECT_EQ(vexp(0.0f), 1.0f);
  EXPECT_LT(vexp(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(vexp(1000.0f)));
}

TEST(VecMath, TanhAndErfMatchLibm) {
  for (float x = -12.0f; x <= 12.0f; x += 0.0013f) {
    ASSERT_NEAR(vtanh(x), std::tanh(x), 3e-7f) << "x=" << x;
    ASSERT_NEAR(verf(x), std::erf(x), 3e-7f) << "x=" << x;
  }
  EXPECT_EQ(vtanh(0.0f), 0.0f);
  EXPECT_EQ(verf(0.0f), 0.0f);
}

TEST(Gelu, BothFormsMatchTheirDefinitions) {
  std::vector<float> a, b;
  for (float x = -8.0f; x <= 8.0f; x += 0.01f) a.push_back(x);
  b = a;
  gelu_erf(a.data(), static_cast<long>(a.size()));
  gelu_tanh(b.data(), static_cast<long>(b.size()));
  float x = -8.0f;
  for (std::size_t i = 0; i < a.size(); ++i, x += 0.01f) {
    const double xd = x;
    const double erf_form = 0.5 * xd * (1.0 + std::erf(xd / std::sqrt(2.0)));
    const double tanh_form =
        0.5 * xd * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)));
    ASSERT_NEAR(a[i], erf_form, 2e-6) << "x=" << x;
    ASSERT_NEAR(b[i], tanh_form, 2e-6) << "x=" << x;
  }
  // The two forms differ, so a model run with the wrong one is caught.
  EXPECT_GT(std::abs(a[850] - b[850]) + std::abs(a[900] - b[900]), 0.0f);
}

}  // namespace
}  // namespace kvtier::kernels
