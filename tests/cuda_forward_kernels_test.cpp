// The CUDA kernels of the GPT-2 forward beyond attention against their CPU
// references on random inputs: LayerNorm and GELU within tolerance
// (LayerNorm also bit for bit between a row alone and in a batch, and in
// place), the residual add and the embedding lookup bit for bit. Built only
// with the CUDA side; on a machine without a device every test is skipped
// with the reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/gelu_cuda.h"
#include "kernels/cuda/layernorm_cuda.h"
#include "kernels/cuda/residual_cuda.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"
#include "tests/cuda_test_util.h"

namespace kvtier::kernels {
namespace {

using cuda_test_util::DeviceBuffer;
using cuda_test_util::from_device;
using cuda_test_util::random_floats;
using cuda_test_util::to_device;
using CudaForwardKernels = cuda_test_util::CudaDeviceTest;

constexpr float kEps = 1e-5f;

// Rows with a per-row offset and spread (LayerNorm's inputs are far from
// zero-mean in a real model).
std::vector<float> layernorm_input(int M, int C, unsigned seed) {
  auto x = random_floats(static_cast<std::size_t>(M) * C, seed);
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < C; ++i) {
      float& v = x[static_cast<std::size_t>(m) * C + i];
      v = v * (0.1f + static_cast<float>(m % 7)) + static_cast<float>(m % 5) - 2.0f;
    }
  return x;
}

TEST_F(CudaForwardKernels, LayerNormMatchesTheCpuReference) {
  // 768: GPT-2's width; 100: a partial last warp; 1: a single element (var 0).
  for (int C : {768, 100, 1}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(testing::Message()
                   << "C " << C << (with_bias ? " with" : " without") << " bias");
      const int M = 37;
      const auto x = layernorm_input(M, C, 10 + C);
      const auto w = random_floats(C, 11, 0.5f), b = random_floats(C, 12, 0.2f);
      std::vector<float> want(x.size());
      layernorm(want.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, M, C, kEps);

      auto d_x = to_device(x), d_w = to_device(w), d_b = to_device(b);
      DeviceBuffer d_out(x.size() * sizeof(float));
      const float* bias = with_bias ? d_b->as<float>() : nullptr;
      CUDA_OK(layernorm_cuda(d_out.as<float>(), d_x->as<float>(), d_w->as<float>(), bias, M, C,
                             kEps, 0));
      // In place: the same bits.
      CUDA_OK(layernorm_cuda(d_x->as<float>(), d_x->as<float>(), d_w->as<float>(), bias, M, C, kEps,
                             0));
      CUDA_OK(cudaDeviceSynchronize());
      const auto got = from_device<float>(d_out, x.size());
      const auto in_place = from_device<float>(*d_x, x.size());
      int differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "element " << i;
        differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(std::memcmp(got.data(), in_place.data(), got.size() * sizeof(float)), 0);
      std::printf("layernorm C %d: %d of %zu elements differ from the CPU's bits\n", C, differ,
                  got.size());
    }
  }
}

TEST_F(CudaForwardKernels, LayerNormRowAloneGivesTheBitsItHadInTheBatch) {
  const int M = 64, C = 768, row = 17;
  const auto x = layernorm_input(M, C, 20);
  const auto w = random_floats(C, 21, 0.5f), b = random_floats(C, 22, 0.2f);
  auto d_x = to_device(x), d_w = to_device(w), d_b = to_device(b);
  DeviceBuffer d_batch(x.size() * sizeof(float)), d_one(C * sizeof(float));
  CUDA_OK(layernorm_cuda(d_batch.as<float>(), d_x->as<float>(), d_w->as<float>(), d_b->as<float>(),
                         M, C, kEps, 0));
  CUDA_OK(layernorm_cuda(d_one.as<float>(), d_x->as<float>() + static_cast<long>(row) * C,
                         d_w->as<float>(), d_b->as<float>(), 1, C, kEps, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const auto batch = from_device<float>(d_batch, x.size());
  const auto one = from_device<float>(d_one, C);
  EXPECT_EQ(std::memcmp(one.data(), batch.data() + static_cast<long>(row) * C, C * sizeof(float)),
            0);
}

// gelu_cuda.h promises the CPU's bits (the same element functions, no fused
// multiply-add on either side): the tolerance only makes a gross error read
// better than a count.
TEST_F(CudaForwardKernels, GeluGivesTheCpuBits) {
  // Normal values, wide ones (the tails and the clamps of vexp) and the edges.
  auto x = random_floats(100003, 30, 3.0f);
  const auto wide = random_floats(1000, 31, 40.0f);
  x.insert(x.end(), wide.begin(), wide.end());
  x.insert(x.end(),
           {0.0f, -0.0f, 1e-30f, -1e-30f, 0.0625f, -0.0625f, 100.0f, -100.0f, FLT_MAX, -FLT_MAX});
  const long n = static_cast<long>(x.size());
  for (bool erf_form : {true, false}) {
    SCOPED_TRACE(erf_form ? "gelu_erf" : "gelu_tanh");
    std::vector<float> want = x;
    if (erf_form)
      gelu_erf(want.data(), n);
    else
      gelu_tanh(want.data(), n);
    auto d_x = to_device(x);
    CUDA_OK(erf_form ? gelu_erf_cuda(d_x->as<float>(), n, 0)
                     : gelu_tanh_cuda(d_x->as<float>(), n, 0));
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = from_device<float>(*d_x, x.size());
    int differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-6 + 1e-6 * std::fabs(want[i])) << "x " << x[i];
      differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    }
    EXPECT_EQ(differ, 0) << "of " << got.size() << " elements differ from the CPU's bits";
  }
}

TEST_F(CudaForwardKernels, ResidualAddGivesTheCpuBits) {
  const long n = (1L << 20) + 7;
  const auto a = random_floats(n, 40), b = random_floats(n, 41, 0.01f);
  std::vector<float> want(n);
  residual_add(want.data(), a.data(), b.data(), n);
  auto d_a = to_device(a), d_b = to_device(b);
  DeviceBuffer d_out(n * sizeof(float));
  CUDA_OK(residual_add_cuda(d_out.as<float>(), d_a->as<float>(), d_b->as<float>(), n, 0));
  CUDA_OK(
      residual_add_cuda(d_a->as<float>(), d_a->as<float>(), d_b->as<float>(), n, 0));  // in place
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(std::memcmp(from_device<float>(d_out, n).data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(from_device<float>(*d_a, n).data(), want.data(), n * sizeof(float)), 0);
}

TEST_F(CudaForwardKernels, EmbeddingGivesTheCpuBits) {
  const int V = 50, T = 64, C = 300, M = 45;
  const auto wte = random_floats(static_cast<std::size_t>(V) * C, 50, 0.02f);
  const auto wpe = random_floats(static_cast<std::size_t>(T) * C, 51, 0.01f);
  std::mt19937 rng(52);
  std::vector<int> tokens(M), positions(M);
  for (int m = 0; m < M; ++m) {
    tokens[m] = static_cast<int>(rng() % V);
    positions[m] = static_cast<int>(rng() % T);
  }
  tokens[0] = V - 1;  // the last rows of both tables
  positions[0] = T - 1;
  std::vector<float> want(static_cast<std::size_t>(M) * C);
  embedding(want.data(), tokens.data(), positions.data(), wte.data(), wpe.data(), M, C);
  auto d_wte = to_device(wte), d_wpe = to_device(wpe);
  auto d_tokens = to_device(tokens), d_positions = to_device(positions);
  DeviceBuffer d_out(want.size() * sizeof(float));
  CUDA_OK(embedding_cuda(d_out.as<float>(), d_tokens->as<int>(), d_positions->as<int>(),
                         d_wte->as<float>(), d_wpe->as<float>(), M, C, 0));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(std::memcmp(from_device<float>(d_out, want.size()).data(), want.data(),
                        want.size() * sizeof(float)),
            0);
}

// The launchers check shapes before touching the device, so this runs anywhere.
TEST(CudaForwardKernelsLaunch, BadShapesAreRejectedBeforeLaunch) {
  EXPECT_EQ(layernorm_cuda(nullptr, nullptr, nullptr, nullptr, -1, 8, kEps, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(layernorm_cuda(nullptr, nullptr, nullptr, nullptr, 1, 0, kEps, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(layernorm_cuda(nullptr, nullptr, nullptr, nullptr, 0, 8, kEps, 0), cudaSuccess);
  EXPECT_EQ(gelu_erf_cuda(nullptr, -1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(gelu_tanh_cuda(nullptr, -1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(gelu_erf_cuda(nullptr, 0, 0), cudaSuccess);
  EXPECT_EQ(residual_add_cuda(nullptr, nullptr, nullptr, -1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(residual_add_cuda(nullptr, nullptr, nullptr, 0, 0), cudaSuccess);
  EXPECT_EQ(embedding_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 0, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(embedding_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8, 0), cudaSuccess);
}

}  // namespace
}  // namespace kvtier::kernels
