#include "kernels/vec_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

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

// The library's loops are vectorised (built with -fno-trapping-math, so both
// sides of vtanh's branch and vexp's clamps become selects); this file's calls
// of the element functions are scalar. Same bits, over a sample of every
// float bit pattern: negative and positive, tiny, huge, inf and NaN. (Checked
// once over all 2^32 inputs when the flag came in; that takes minutes.)
TEST(Gelu, VectorisedLoopsGiveTheElementFunctionsBits) {
  std::vector<float> in;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4093)
    in.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  for (float x : {0.0f, -0.0f, 0.0625f, -0.0625f, 44.0f, -43.65f, INFINITY, -INFINITY, NAN})
    in.push_back(x);
  std::vector<float> erf_form = in, tanh_form = in;
  gelu_erf(erf_form.data(), static_cast<long>(erf_form.size()));
  gelu_tanh(tanh_form.data(), static_cast<long>(tanh_form.size()));
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(erf_form[i]),
              std::bit_cast<std::uint32_t>(gelu_erf_element(in[i])))
        << "x=" << in[i];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(tanh_form[i]),
              std::bit_cast<std::uint32_t>(gelu_tanh_element(in[i])))
        << "x=" << in[i];
  }
}

}  // namespace
}  // namespace kvtier::kernels
