// The int8 KV block format (kernels/kv_quant.h): round-trip error within half
// a scale per element, exact zeros, all-zero heads, extreme magnitudes,
// round-to-nearest-even, the scale order and the encoded size.
#include "kernels/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kvtier::kernels {
namespace {

constexpr KvShape kShape{2, 3, 8, 4};  // L, Hkv, D, P: 12 runs of 32 floats

struct Encoded {
  std::vector<float> storage;  // float-aligned bytes
  explicit Encoded(const KvShape& s) : storage((kv_quant_bytes(s) + 3) / 4) {}
  void* data() { return storage.data(); }
};

std::vector<float> random_block(const KvShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(s.floats_per_block());
  // Runs of very different magnitudes: each has its own scale.
  for (long r = 0; r < s.runs_per_block(); ++r) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(r % 7) * 3 - 9);
    for (long i = 0; i < s.floats_per_run(); ++i)
      x[r * s.floats_per_run() + i] = magnitude * normal(rng);
  }
  return x;
}

// Every element within scale/2 (plus float rounding) of its original; the
// scales are absmax / 127.
void expect_round_trip(const std::vector<float>& x, const KvShape& s) {
  Encoded enc(s);
  quantize_block(x.data(), s, enc.data());
  std::vector<float> y(x.size(), NAN);
  dequantize_block(enc.data(), s, y.data());
  const float* scales = kv_quant_scales(enc.data());
  for (long r = 0; r < s.runs_per_block(); ++r) {
    float absmax = 0.0f;
    for (long i = 0; i < s.floats_per_run(); ++i)
      absmax = std::max(absmax, std::fabs(x[r * s.floats_per_run() + i]));
    const float want = absmax / 127.0f;  // one ulp lower where 127 * it would overflow
    const float expected = std::isinf(want * 127.0f) ? std::nextafter(want, 0.0f) : want;
    ASSERT_EQ(scales[r], expected) << "run " << r;
    const double bound = 0.5 * scales[r] * (1.0 + 0x1p-16);
    for (long i = 0; i < s.floats_per_run(); ++i) {
      const long k = r * s.floats_per_run() + i;
      ASSERT_TRUE(std::isfinite(y[k])) << k;
      ASSERT_LE(std::fabs(static_cast<double>(x[k]) - y[k]), bound)
          << "run " << r << " element " << i << ": " << x[k] << " -> " << y[k];
    }
  }
}

TEST(KvQuant, RoundTripIsWithinHalfAScale) {
  for (unsigned seed = 1; seed <= 5; ++seed) expect_round_trip(random_block(kShape, seed), kShape);
}

TEST(KvQuant, ExactZerosStayExact) {
  auto x = random_block(kShape, 7);
  for (std::size_t k = 0; k < x.size(); k += 3) x[k] = (k % 2 == 0) ? 0.0f : -0.0f;
  Encoded enc(kShape);
  quantize_block(x.data(), kShape, enc.data());
  std::vector<float> y(x.size());
  dequantize_block(enc.data(), kShape, y.data());
  for (std::size_t k = 0; k < x.size(); k += 3) {
    EXPECT_EQ(kv_quant_values(enc.data(), kShape)[k], 0) << k;
    EXPECT_EQ(y[k], 0.0f) << k;
  }
}

TEST(KvQuant, AllZeroHeadHasScaleZeroAndDecodesToZeros) {
  auto x = random_block(kShape, 3);
  // Layer 1, V, head 2: run (1 * 2 + 1) * 3 + 2 = 11, at KvShape::v_offset(1) + 2 D P.
  const long run = (1 * 2 + 1) * kShape.n_kv_head + 2;
  const long start = kShape.v_offset(1) + 2 * kShape.floats_per_run();
  ASSERT_EQ(start, run * kShape.floats_per_run());
  std::fill(x.begin() + start, x.begin() + start + kShape.floats_per_run(), 0.0f);
  Encoded enc(kShape);
  quantize_block(x.data(), kShape, enc.data());
  EXPECT_EQ(kv_quant_scales(enc.data())[run], 0.0f);
  for (long r = 0; r < kShape.runs_per_block(); ++r)
    if (r != run) {
      EXPECT_GT(kv_quant_scales(enc.data())[r], 0.0f) << r;
    }
  std::vector<float> y(x.size(), NAN);
  dequantize_block(enc.data(), kShape, y.data());
  for (long i = 0; i < kShape.floats_per_run(); ++i) EXPECT_EQ(y[start + i], 0.0f) << i;
  expect_round_trip(x, kShape);
}

TEST(KvQuant, ExtremeMagnitudesStayFiniteAndBounded) {
  auto x = random_block(kShape, 11);
  const long n = kShape.floats_per_run();
  // Run 0: FLT_MAX at both signs beside ordinary values; run 1: all tiny
  // (normal scale, 1e-30 / 127); run 2: one huge value and the rest tiny.
  x[0] = FLT_MAX;
  x[1] = -FLT_MAX;
  for (long i = 0; i < n; ++i) x[n + i] = 1e-30f * static_cast<float>(i % 5 - 2);
  x[2 * n] = -3e38f;
  for (long i = 1; i < n; ++i) x[2 * n + i] = 1e-20f;
  expect_round_trip(x, kShape);
  Encoded enc(kShape);
  quantize_block(x.data(), kShape, enc.data());
  const std::int8_t* q = kv_quant_values(enc.data(), kShape);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2 * n], -127);
  EXPECT_EQ(q[2 * n + 1], 0);  // far below half a scale
}

TEST(KvQuant, RoundsHalfwayToEven) {
  // absmax 127 gives scale exactly 1, so x / scale is x.
  EXPECT_EQ(kv_quant_scale(127.0f), 1.0f);
  EXPECT_EQ(kv_quantize(2.5f, 1.0f), 2);
  EXPECT_EQ(kv_quantize(3.5f, 1.0f), 4);
  EXPECT_EQ(kv_quantize(-2.5f, 1.0f), -2);
  EXPECT_EQ(kv_quantize(0.5f, 1.0f), 0);
  EXPECT_EQ(kv_quantize(-126.5f, 1.0f), -126);
  EXPECT_EQ(kv_quantize(127.0f, 1.0f), 127);
  EXPECT_EQ(kv_quantize(-127.0f, 1.0f), -127);
  EXPECT_EQ(kv_quantize(5.0f, 0.0f), 0);
}

TEST(KvQuant, EncodedSizeIsAQuarterOfFp32PlusOneScalePerHeadRun) {
  EXPECT_EQ(kv_quant_bytes(kShape),
            sizeof(float) * kShape.floats_per_block() / 4 + sizeof(float) * 2 * 2 * 3);
  const KvShape gpt2{12, 12, 64, 16};
  EXPECT_EQ(gpt2.floats_per_block(), 294912);
  EXPECT_EQ(kv_quant_bytes(gpt2), 294912u + 1152u);
  // The values start right after the scales.
  Encoded enc(kShape);
  EXPECT_EQ(reinterpret_cast<const char*>(kv_quant_values(enc.data(), kShape)) -
                reinterpret_cast<const char*>(enc.data()),
            static_cast<long>(sizeof(float) * kShape.runs_per_block()));
}

TEST(KvQuant, EncodingIsDeterministic) {
  const auto x = random_block(kShape, 5);
  Encoded a(kShape), b(kShape);
  std::memset(a.data(), 0x11, kv_quant_bytes(kShape));
  std::memset(b.data(), 0x22, kv_quant_bytes(kShape));
  quantize_block(x.data(), kShape, a.data());
  quantize_block(x.data(), kShape, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), kv_quant_bytes(kShape)), 0);
}

}  // namespace
}  // namespace kvtier::kernels
