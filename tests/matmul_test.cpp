// Tests kernels/matmul.cpp: matmul() must equal matmul_reference() bit for bit
// for every shape, layout, bias and thread count, and a row's result must not
// depend on the batch it is computed in.
#include "kernels/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kvtier::kernels {
namespace {

// Uniform in [-2, 2) with full 24-bit mantissas (xorshift32: fast enough for
// the 38M-element LM head).
std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1;
  std::vector<float> v(n);
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = float(std::int32_t(x)) * 0x1p-30f;
  }
  return v;
}

// (N, K) -> (K, N), or back.
std::vector<float> transpose(const std::vector<float>& w, int rows, int cols) {
  std::vector<float> t(w.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) t[std::size_t(c) * rows + r] = w[std::size_t(r) * cols + c];
  }
  return t;
}

const char* layout_name(WeightLayout layout) {
  return layout == WeightLayout::kOutIn ? "kOutIn" : "kInOut";
}

// The fast path on a raw weight: pack it, multiply.
void packed_matmul(float* out, const float* inp, const float* w, const float* bias, int M, int K,
                   int N, WeightLayout layout) {
  matmul(out, inp, PackedWeight::pack(w, K, N, layout), bias, M);
}

// Restores the OpenMP thread count a test changed.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

// Runs matmul_reference once and matmul with 1 and 2 OpenMP threads on one
// random problem, compares bytes and reports the first differing element.
void expect_bitwise_equal(int M, int K, int N, WeightLayout layout, bool with_bias,
                          std::uint32_t seed) {
  const auto inp = random_vector(std::size_t(M) * K, seed);
  const auto w = random_vector(std::size_t(K) * N, seed + 1);
  const auto bias = random_vector(N, seed + 2);
  const float* b = with_bias ? bias.data() : nullptr;
  std::vector<float> want(std::size_t(M) * N, -1.0f);
  matmul_reference(want.data(), inp.data(), w.data(), b, M, K, N, layout);
  for (int threads : {1, 2}) {
    ThreadCount tc(threads);
    std::vector<float> got(std::size_t(M) * N, -2.0f);
    packed_matmul(got.data(), inp.data(), w.data(), b, M, K, N, layout);
    if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0) continue;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
        ADD_FAILURE() << "M=" << M << " K=" << K << " N=" << N << " " << layout_name(layout)
                      << (with_bias ? " bias" : " no bias") << " threads=" << threads
                      << ": first mismatch at m=" << i / N << " n=" << i % N << ": want " << want[i]
                      << " got " << got[i];
        break;
      }
    }
  }
}

TEST(MatmulTest, BitwiseEqualOnAwkwardShapes) {
  const int sizes[] = {1, 3, 15, 16, 17, 31, 33, 100};
  std::uint32_t seed = 1;
  for (int M : sizes) {
    for (int K : sizes) {
      for (int N : sizes) {
        for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
          expect_bitwise_equal(M, K, N, layout, (seed & 1) != 0, seed);
          seed += 3;
        }
      }
    }
  }
}

// Shapes that cross the blocking edges: K past one and several k blocks,
// N past one and several column panels, M past the small-M cut-off and the
// row-block size, and big enough to run threaded.
TEST(MatmulTest, BitwiseEqualAcrossBlockEdges) {
  struct Shape {
    int M, K, N;
  };
  const Shape shapes[] = {{1, 257, 65},   {2, 513, 1000},  {16, 300, 777}, {17, 255, 129},
                          {37, 520, 801}, {40, 130, 1700}, {130, 260, 95}, {200, 64, 800},
                          {13, 800, 700}, {5, 3, 4099},    {64, 1027, 33}};
  std::uint32_t seed = 1000;
  for (const Shape& s : shapes) {
    for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
      for (bool with_bias : {false, true}) {
        expect_bitwise_equal(s.M, s.K, s.N, layout, with_bias, seed++);
      }
    }
  }
}

TEST(MatmulTest, BitwiseEqualOnGpt2Shapes) {
  struct Shape {
    int K, N;
  };
  const Shape shapes[] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
  std::uint32_t seed = 2000;
  for (const Shape& s : shapes) {
    for (int M : {1, 4, 16}) {
      for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
        expect_bitwise_equal(M, s.K, s.N, layout, true, seed++);
      }
    }
  }
  // A prefill-sized block, once per layout.
  expect_bitwise_equal(128, 768, 768, WeightLayout::kOutIn, true, seed++);
  expect_bitwise_equal(128, 768, 768, WeightLayout::kInOut, true, seed++);
}

TEST(MatmulTest, LmHeadShapeAtDecodeSizes) {
  // (V, C) = (50257, 768) embedding matrix used as a kOutIn weight.
  const int K = 768, N = 50257;
  for (int M : {1, 3}) expect_bitwise_equal(M, K, N, WeightLayout::kOutIn, false, 3000 + M);
}

// Batch invariance: row r computed alone equals row r inside a batch of 37.
TEST(MatmulTest, RowAloneEqualsRowInBatch) {
  const int M = 37, K = 300, N = 290;
  const auto inp = random_vector(std::size_t(M) * K, 7);
  const auto w = random_vector(std::size_t(K) * N, 8);
  const auto bias = random_vector(N, 9);
  for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (int threads : {1, 2}) {
      ThreadCount tc(threads);
      const PackedWeight packed = PackedWeight::pack(w.data(), K, N, layout);
      std::vector<float> batch(std::size_t(M) * N);
      matmul(batch.data(), inp.data(), packed, bias.data(), M);
      for (int r = 0; r < M; ++r) {
        std::vector<float> alone(N);
        matmul(alone.data(), inp.data() + std::size_t(r) * K, packed, bias.data(), 1);
        EXPECT_EQ(std::memcmp(alone.data(), batch.data() + std::size_t(r) * N, N * sizeof(float)),
                  0)
            << layout_name(layout) << " threads=" << threads << " row " << r;
      }
    }
  }
}

// A packed weight owns its copy: the source may go away before it is used.
TEST(MatmulTest, PackedWeightOutlivesItsSource) {
  const int M = 17, K = 100, N = 70;
  const auto inp = random_vector(std::size_t(M) * K, 41);
  std::vector<float> want(std::size_t(M) * N);
  PackedWeight packed;
  {
    auto w = random_vector(std::size_t(K) * N, 42);
    matmul_reference(want.data(), inp.data(), w.data(), nullptr, M, K, N, WeightLayout::kInOut);
    packed = PackedWeight::pack(w.data(), K, N, WeightLayout::kInOut);
    std::fill(w.begin(), w.end(), NAN);
  }
  EXPECT_EQ(packed.in_features(), K);
  EXPECT_EQ(packed.out_features(), N);
  EXPECT_GE(packed.bytes(), std::size_t(K) * N * sizeof(float));
  std::vector<float> got(std::size_t(M) * N);
  matmul(got.data(), inp.data(), packed, nullptr, M);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
}

// A kOutIn weight and its transpose passed as kInOut give the same bits.
TEST(MatmulTest, LayoutsAgree) {
  for (int M : {1, 5, 40}) {
    const int K = 333, N = 201;
    const auto inp = random_vector(std::size_t(M) * K, 11);
    const auto w_out_in = random_vector(std::size_t(N) * K, 12);
    const auto w_in_out = transpose(w_out_in, N, K);
    const auto bias = random_vector(N, 13);
    std::vector<float> a(std::size_t(M) * N), b(std::size_t(M) * N);
    packed_matmul(a.data(), inp.data(), w_out_in.data(), bias.data(), M, K, N,
                  WeightLayout::kOutIn);
    packed_matmul(b.data(), inp.data(), w_in_out.data(), bias.data(), M, K, N,
                  WeightLayout::kInOut);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "M=" << M;
  }
}

// Both paths are close to a double-precision dot product (sanity check of the
// arithmetic itself, not only of the agreement).
TEST(MatmulTest, CloseToDoublePrecision) {
  const int M = 20, K = 768, N = 100;
  const auto inp = random_vector(std::size_t(M) * K, 21);
  const auto w = random_vector(std::size_t(N) * K, 22);
  const auto bias = random_vector(N, 23);
  std::vector<float> got(std::size_t(M) * N), ref(std::size_t(M) * N);
  packed_matmul(got.data(), inp.data(), w.data(), bias.data(), M, K, N, WeightLayout::kOutIn);
  matmul_reference(ref.data(), inp.data(), w.data(), bias.data(), M, K, N, WeightLayout::kOutIn);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double want = bias[n];
      double scale = std::abs(bias[n]);
      for (int k = 0; k < K; ++k) {
        const double p = double(inp[std::size_t(m) * K + k]) * w[std::size_t(n) * K + k];
        want += p;
        scale += std::abs(p);
      }
      // fp32 accumulation over K terms: error well within K * eps * sum|terms|.
      const double tol = 1e-5 * scale + 1e-6;
      EXPECT_NEAR(got[std::size_t(m) * N + n], want, tol) << "m=" << m << " n=" << n;
      EXPECT_NEAR(ref[std::size_t(m) * N + n], want, tol) << "m=" << m << " n=" << n;
    }
  }
}

// Special values follow the same fma chain: infinities and NaNs propagate the
// same way, and -0 products follow the reference's signed-zero rules.
TEST(MatmulTest, SpecialValuesMatchReference) {
  const int M = 3, K = 20, N = 40;
  auto inp = random_vector(std::size_t(M) * K, 31);
  auto w = random_vector(std::size_t(K) * N, 32);
  inp[0] = -0.0f;
  inp[K + 1] = INFINITY;
  w[5] = NAN;
  for (int k = 0; k < K; ++k) inp[2 * K + k] = -0.0f;
  for (auto layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    std::vector<float> want(std::size_t(M) * N), got(std::size_t(M) * N);
    matmul_reference(want.data(), inp.data(), w.data(), nullptr, M, K, N, layout);
    packed_matmul(got.data(), inp.data(), w.data(), nullptr, M, K, N, layout);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << layout_name(layout);
  }
}

}  // namespace
}  // namespace kvtier::kernels
