// The CUDA matmul (kernels/cuda/matmul.cu) against the CPU's: the same
// determinism contract, so the same bits, for both weight orientations, with
// and without a bias, at decode and prefill row counts and at sizes that are
// not multiples of the tiles. Built only with the CUDA side; skipped with the
// reason on a machine without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "kernels/cuda/matmul_cuda.h"
#include "kernels/matmul.h"
#include "tests/cuda_test_util.h"

namespace kvtier::kernels {
namespace {

using cuda_test_util::DeviceBuffer;
using cuda_test_util::random_floats;
using cuda_test_util::to_device;
using CudaMatmul = cuda_test_util::CudaDeviceTest;

TEST_F(CudaMatmul, GivesTheCpuBitsForEveryShapeAndLayout) {
  // (M, K, N): each tile shape (rows, small, large: see matmul.cu) and its
  // edges, ragged sizes.
  const std::vector<std::tuple<int, int, int>> shapes = {
      {1, 768, 2304}, {4, 100, 70},   {5, 100, 70},    {16, 64, 96},
      {17, 64, 96},   {100, 33, 129}, {256, 768, 768}, {300, 40, 4000}};
  unsigned seed = 1;
  for (const auto& [M, K, N] : shapes)
    for (const WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut})
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "M " << M << " K " << K << " N " << N << " layout "
                                          << (layout == WeightLayout::kOutIn ? "out-in" : "in-out")
                                          << (with_bias ? " bias" : " no bias"));
        const auto inp = random_floats(static_cast<std::size_t>(M) * K, ++seed);
        const auto w = random_floats(static_cast<std::size_t>(K) * N, ++seed, 0.05f);
        const auto b = random_floats(N, ++seed, 0.1f);
        std::vector<float> want(static_cast<std::size_t>(M) * N), fast(want.size());
        const float* bias = with_bias ? b.data() : nullptr;
        matmul_reference(want.data(), inp.data(), w.data(), bias, M, K, N, layout);
        matmul(fast.data(), inp.data(), PackedWeight::pack(w.data(), K, N, layout), bias, M);

        auto d_inp = to_device(inp), d_w = to_device(w), d_b = to_device(b);
        DeviceBuffer d_out(want.size() * sizeof(float));
        CUDA_OK(matmul_cuda(d_out.as<float>(), d_inp->as<float>(), d_w->as<float>(),
                            with_bias ? d_b->as<float>() : nullptr, M, K, N, layout, 0));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(want.size());
        d_out.download(got.data());
        long differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
          differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0) << "of " << got.size() << " outputs differ from the reference's bits";
        EXPECT_EQ(std::memcmp(fast.data(), want.data(), want.size() * sizeof(float)), 0);

        // The last row alone (other tiles, other threads) gives the same bits.
        CUDA_OK(matmul_cuda(d_out.as<float>(), d_inp->as<float>() + static_cast<long>(M - 1) * K,
                            d_w->as<float>(), with_bias ? d_b->as<float>() : nullptr, 1, K, N,
                            layout, 0));
        CUDA_OK(cudaDeviceSynchronize());
        const auto alone = from_device<float>(d_out, static_cast<std::size_t>(N));
        EXPECT_EQ(
            std::memcmp(alone.data(), got.data() + static_cast<long>(M - 1) * N, N * sizeof(float)),
            0);
      }
}

// The launcher checks shapes before touching the device, so this runs anywhere.
TEST(CudaMatmulLaunch, BadShapesAreRejectedBeforeLaunch) {
  EXPECT_EQ(matmul_cuda(nullptr, nullptr, nullptr, nullptr, -1, 4, 4, WeightLayout::kOutIn, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(matmul_cuda(nullptr, nullptr, nullptr, nullptr, 1, 0, 4, WeightLayout::kInOut, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(matmul_cuda(nullptr, nullptr, nullptr, nullptr, 1, 4, 0, WeightLayout::kInOut, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(matmul_cuda(nullptr, nullptr, nullptr, nullptr, 0, 4, 4, WeightLayout::kOutIn, 0),
            cudaSuccess);
}

}  // namespace
}  // namespace kvtier::kernels
