// The CUDA kernels of the nanochat forward against their CPU references on
// random inputs: rotary, ReLU², the scaled sum and the row gather bit for
// bit; RMS norm (with the q/k scale), softcap and the gated rows within
// tolerance (tree sums, CUDA's expf and tanhf); RMS norm also bit for bit
// between a row alone and in a batch. Built only with the CUDA side; on a
// machine without a device every test is skipped with the reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/gated_rows_cuda.h"
#include "kernels/cuda/rmsnorm_cuda.h"
#include "kernels/cuda/rotary_cuda.h"
#include "kernels/elementwise.h"
#include "kernels/gated_rows.h"
#include "kernels/rmsnorm.h"
#include "kernels/rotary.h"
#include "tests/cuda_test_util.h"

namespace kvtier::kernels {
namespace {

using cuda_test_util::DeviceBuffer;
using cuda_test_util::from_device;
using cuda_test_util::random_floats;
using cuda_test_util::to_device;
using CudaNanochatKernels = cuda_test_util::CudaDeviceTest;

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "element " << i;
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
}

TEST_F(CudaNanochatKernels, RmsNormMatchesTheCpuAndIgnoresTheBatch) {
  // 1280: d20's width; 128 and 64: head dims; 100: a partial last warp.
  for (int C : {1280, 128, 100, 64}) {
    for (float scale : {1.0f, 1.2f}) {
      SCOPED_TRACE(testing::Message() << "C " << C << " scale " << scale);
      const int M = 37;
      auto x = random_floats(static_cast<std::size_t>(M) * C, 20 + C, 3.0f);
      std::vector<float> want(x.size());
      rmsnorm(want.data(), x.data(), M, C);
      if (scale != 1.0f)
        for (float& v : want) v *= scale;
      auto d_x = to_device(x);
      DeviceBuffer d_y(x.size() * sizeof(float));
      CUDA_OK(rmsnorm_cuda(d_y.as<float>(), d_x->as<float>(), M, C, kRmsNormEps, scale, 0));
      CUDA_OK(cudaDeviceSynchronize());
      const auto got = from_device<float>(d_y, x.size());
      expect_near(got, want, 1e-6);
      // Row 5 alone, in place: the bits it had in the batch.
      auto d_row = to_device(std::vector<float>(x.begin() + 5 * C, x.begin() + 6 * C));
      CUDA_OK(rmsnorm_cuda(d_row->as<float>(), d_row->as<float>(), 1, C, kRmsNormEps, scale, 0));
      CUDA_OK(cudaDeviceSynchronize());
      expect_bits(from_device<float>(*d_row, C),
                  std::vector<float>(got.begin() + 5 * C, got.begin() + 6 * C));
    }
  }
}

TEST_F(CudaNanochatKernels, RotaryGivesTheCpuBits) {
  for (bool bf16 : {true, false}) {
    const int heads = 3, D = 64, M = 21, stride = heads * D + 32;  // rows wider than the heads
    RotaryTable table(D, 100000.0f, 400, bf16);
    auto x = random_floats(static_cast<std::size_t>(M) * stride, 31);
    std::vector<int> pos(M);
    for (int r = 0; r < M; ++r) pos[r] = (r * 37) % 400;
    std::vector<float> want = x;
    for (int r = 0; r < M; ++r)
      table.apply(want.data() + static_cast<long>(r) * stride, heads, pos[r]);
    const std::size_t n = static_cast<std::size_t>(table.positions()) * (D / 2);
    auto d_cos = to_device(std::vector<float>(table.cos(0), table.cos(0) + n));
    auto d_sin = to_device(std::vector<float>(table.sin(0), table.sin(0) + n));
    auto d_x = to_device(x);
    auto d_pos = to_device(pos);
    CUDA_OK(rotary_cuda(d_x->as<float>(), stride, heads, D, d_pos->as<int>(), d_cos->as<float>(),
                        d_sin->as<float>(), M, 0));
    CUDA_OK(cudaDeviceSynchronize());
    expect_bits(from_device<float>(*d_x, x.size()), want);
  }
}

TEST_F(CudaNanochatKernels, ElementwiseStepsMatchTheCpu) {
  const long n = 10007;
  const auto x = random_floats(n, 41, 4.0f), y = random_floats(n, 42);
  {
    std::vector<float> want = x;
    relu_squared(want.data(), n);
    auto d = to_device(x);
    CUDA_OK(relu_squared_cuda(d->as<float>(), n, 0));
    CUDA_OK(cudaDeviceSynchronize());
    expect_bits(from_device<float>(*d, n), want);
  }
  {
    std::vector<float> want(n);
    scale_add(want.data(), 0.7f, x.data(), -1.3f, y.data(), n);
    auto dx = to_device(x), dy = to_device(y);
    CUDA_OK(scale_add_cuda(dx->as<float>(), 0.7f, dx->as<float>(), -1.3f, dy->as<float>(), n, 0));
    CUDA_OK(cudaDeviceSynchronize());
    expect_bits(from_device<float>(*dx, n), want);
  }
  {
    std::vector<float> z = x;
    for (float& v : z) v *= 20.0f;  // into the cap's bend
    std::vector<float> want = z;
    softcap(want.data(), n, 15.0f);
    auto d = to_device(z);
    CUDA_OK(softcap_cuda(d->as<float>(), n, 15.0f, 0));
    CUDA_OK(cudaDeviceSynchronize());
    expect_near(from_device<float>(*d, n), want, 1e-6);
  }
}

// Value embeddings (a table indexed by token, a gate per KV head) and smear
// (the gate reads the row it updates; rows at position 0 skipped).
TEST_F(CudaNanochatKernels, GatedRowsAndGatherMatchTheCpu) {
  const int M = 19, C = 96, groups = 3, width = 32, ch = 12, V = 50;
  const auto x = random_floats(static_cast<std::size_t>(M) * C, 51);
  const auto table = random_floats(static_cast<std::size_t>(V) * groups * width, 52);
  const auto gate_w = random_floats(static_cast<std::size_t>(groups) * ch, 53);
  const auto out0 = random_floats(static_cast<std::size_t>(M) * groups * width, 54);
  std::vector<int> ids(M), skip(M);
  for (int r = 0; r < M; ++r) ids[r] = (r * 7) % V, skip[r] = r % 5 == 0 ? -1 : ids[r];
  auto d_x = to_device(x), d_table = to_device(table), d_gate = to_device(gate_w);
  auto d_ids = to_device(ids), d_skip = to_device(skip);

  // Value embeddings: out (M, groups * width) += gate * table[ids].
  std::vector<float> want = out0;
  GatedRows g{.out = want.data(),
              .out_stride = groups * width,
              .gate_in = x.data(),
              .gate_in_stride = C,
              .gate_channels = ch,
              .gate_weight = gate_w.data(),
              .groups = groups,
              .width = width,
              .src = table.data(),
              .src_stride = groups * width,
              .src_row = ids.data(),
              .scale = 3.0f,
              .rows = M};
  gated_add_rows(g);
  auto d_out = to_device(out0);
  g.out = d_out->as<float>(), g.gate_in = d_x->as<float>(), g.gate_weight = d_gate->as<float>();
  g.src = d_table->as<float>(), g.src_row = d_ids->as<int>();
  CUDA_OK(gated_add_rows_cuda(g, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect_near(from_device<float>(*d_out, out0.size()), want, 1e-6);

  // Smear: x += gate(x[:24]) * prev, prev gathered by previous id (-1: zero
  // row, and the row skipped).
  std::vector<float> prev(static_cast<std::size_t>(M) * C);
  const auto wide = random_floats(static_cast<std::size_t>(V) * C, 55);
  gather_rows(prev.data(), wide.data(), skip.data(), M, C);
  auto d_wide = to_device(wide);
  DeviceBuffer d_prev(prev.size() * sizeof(float));
  CUDA_OK(gather_rows_cuda(d_prev.as<float>(), d_wide->as<float>(), d_skip->as<int>(), M, C, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect_bits(from_device<float>(d_prev, prev.size()), prev);
  const auto smear_w = random_floats(24, 56);
  auto d_smear = to_device(smear_w);
  std::vector<float> want_x = x;
  GatedRows s{.out = want_x.data(),
              .out_stride = C,
              .gate_in = want_x.data(),
              .gate_in_stride = C,
              .gate_channels = 24,
              .gate_weight = smear_w.data(),
              .groups = 1,
              .width = C,
              .src = prev.data(),
              .src_stride = C,
              .skip = skip.data(),
              .scale = 0.5f,
              .rows = M};
  gated_add_rows(s);
  s.out = d_x->as<float>();
  s.gate_in = s.out;
  s.gate_weight = d_smear->as<float>(), s.src = d_prev.as<float>(), s.skip = d_skip->as<int>();
  CUDA_OK(gated_add_rows_cuda(s, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const auto got_x = from_device<float>(*d_x, x.size());
  expect_near(got_x, want_x, 1e-6);
  for (int c = 0; c < C; ++c) EXPECT_EQ(got_x[c], x[c]) << "row 0 is skipped";
}

TEST(CudaNanochatKernelsLaunch, BadShapesAreRejectedBeforeLaunch) {
  EXPECT_EQ(rmsnorm_cuda(nullptr, nullptr, -1, 8, kRmsNormEps, 1.0f, 0), cudaErrorInvalidValue);
  EXPECT_EQ(rmsnorm_cuda(nullptr, nullptr, 1, 0, kRmsNormEps, 1.0f, 0), cudaErrorInvalidValue);
  EXPECT_EQ(rotary_cuda(nullptr, 8, 1, 7, nullptr, nullptr, nullptr, 1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(relu_squared_cuda(nullptr, -1, 0), cudaErrorInvalidValue);
  EXPECT_EQ(gated_add_rows_cuda(
                {.gate_channels = 1, .groups = kGatedRowsMaxGroups + 1, .width = 1, .rows = 1}, 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(gather_rows_cuda(nullptr, nullptr, nullptr, 1, 0, 0), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvtier::kernels
