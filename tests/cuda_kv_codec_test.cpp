// The int8 KV codec on the GPU (engine/cuda/cuda_kv_codec.h) against the
// host codec (kernels/kv_quant.h): the same bytes, encoded from device memory
// into host memory and decoded back into device memory, from the engine's
// thread and from several at once. Built only with the CUDA side; without a
// device the device tests are skipped with the reason, and one test checks
// that create() says why.
#include "engine/cuda/cuda_kv_codec.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/kv_quant.h"
#include "tests/cuda_test_util.h"

namespace kvtier {
namespace {

using cuda_test_util::DeviceBuffer;
using cuda_test_util::random_floats;
using cuda_test_util::to_device;
using CudaKvCodecTest = cuda_test_util::CudaDeviceTest;

constexpr kernels::KvShape kShape{4, 4, 32, 16};  // the bundled model's block

TEST(CudaKvCodecNoDevice, CreateSaysWhyWithoutADevice) {
  if (kernels::cuda_device_present()) GTEST_SKIP() << "a CUDA device is present";
  auto codec = CudaKvCodec::create(kShape);
  ASSERT_FALSE(codec.has_value());
  EXPECT_NE(codec.error().find("KV codec: "), std::string::npos) << codec.error();
}

TEST(CudaKvCodecShape, RefusesAnEmptyBlockWithTheReason) {
  auto codec = CudaKvCodec::create({0, 4, 32, 16});
  ASSERT_FALSE(codec.has_value());
  EXPECT_NE(codec.error().find("positive"), std::string::npos) << codec.error();
}

TEST_F(CudaKvCodecTest, EncodesAndDecodesTheHostCodecsBytes) {
  auto codec = CudaKvCodec::create(kShape);
  ASSERT_TRUE(codec.has_value()) << codec.error();
  const std::size_t n = static_cast<std::size_t>(kShape.floats_per_block());
  const std::size_t enc = kernels::kv_quant_bytes(kShape);
  for (unsigned seed = 1; seed <= 3; ++seed) {
    const std::vector<float> block = random_floats(n, seed, std::ldexp(1.0f, seed * 3 - 6));
    auto device = to_device(block);
    std::vector<std::byte> want(enc), got(enc);
    kernels::quantize_block(block.data(), kShape, want.data());
    ASSERT_TRUE((*codec)->encode(got.data(), device->as<std::byte>()).has_value());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), enc), 0) << "seed " << seed;
    std::vector<float> back_want(n), back_got(n);
    kernels::dequantize_block(want.data(), kShape, back_want.data());
    DeviceBuffer back(n * sizeof(float));
    ASSERT_TRUE((*codec)->decode(back.as<std::byte>(), want.data()).has_value());
    back.download(back_got.data());
    EXPECT_EQ(std::memcmp(back_want.data(), back_got.data(), n * sizeof(float)), 0)
        << "seed " << seed;
  }
}

// The copy worker and the engine may call at once: each call is whole.
TEST_F(CudaKvCodecTest, CallsFromSeveralThreadsEachGetTheirOwnBytes) {
  auto codec = CudaKvCodec::create(kShape);
  ASSERT_TRUE(codec.has_value()) << codec.error();
  const std::size_t n = static_cast<std::size_t>(kShape.floats_per_block());
  const std::size_t enc = kernels::kv_quant_bytes(kShape);
  constexpr int kThreads = 4;
  std::vector<std::vector<float>> blocks;
  std::vector<std::unique_ptr<DeviceBuffer>> device;
  for (int t = 0; t < kThreads; ++t) {
    blocks.push_back(random_floats(n, 50 + t));
    device.push_back(to_device(blocks.back()));
  }
  std::vector<std::vector<std::byte>> got(kThreads, std::vector<std::byte>(enc));
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round)
        failures[t] += !(*codec)->encode(got[t].data(), device[t]->as<std::byte>()).has_value();
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0);
    std::vector<std::byte> want(enc);
    kernels::quantize_block(blocks[t].data(), kShape, want.data());
    EXPECT_EQ(std::memcmp(want.data(), got[t].data(), enc), 0) << "thread " << t;
  }
}

}  // namespace
}  // namespace kvtier
