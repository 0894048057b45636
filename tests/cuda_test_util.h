// Helpers shared by the cuda_*_test.cpp files: a status check, self-freeing
// device memory, random inputs, and the fixture that skips, with the reason,
// on a machine without a CUDA device. Header-only.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.h"

namespace kvtier::cuda_test_util {

#define CUDA_OK(expr)                                                                        \
  do {                                                                                       \
    const cudaError_t cuda_ok_err = (expr);                                                  \
    ASSERT_EQ(cuda_ok_err, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_ok_err); \
  } while (0)

// Device memory, freed on scope exit. A failed allocation or copy fails the
// test that asked for it, with the runtime's reason.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (const cudaError_t err = cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes); err != cudaSuccess) {
      ptr_ = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes: " << cudaGetErrorString(err);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  // Landed when it returns: a copy from pageable memory returns once the
  // bytes are staged, and the streams under test do not wait for the legacy
  // one it runs on.
  void upload(const void* src) const {
    check("upload", cudaMemcpy(ptr_, src, bytes_, cudaMemcpyHostToDevice));
    check("upload", cudaStreamSynchronize(cudaStreamLegacy));
  }
  // The first `bytes` (all of them by default) into dst.
  void download(void* dst) const { download(dst, bytes_); }
  void download(void* dst, std::size_t bytes) const {
    if (bytes > bytes_) {
      ADD_FAILURE() << "download of " << bytes << " bytes from a buffer of " << bytes_;
      return;
    }
    check("download", cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
  }

 private:
  static void check(const char* what, cudaError_t err) {
    EXPECT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
  }
  void* ptr_ = nullptr;
  std::size_t bytes_;
};

template <typename T>
std::unique_ptr<DeviceBuffer> to_device(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBuffer>(v.size() * sizeof(T));
  d->upload(v.data());
  return d;
}

// The first n T of a device buffer.
template <typename T>
std::vector<T> from_device(const DeviceBuffer& d, std::size_t n) {
  std::vector<T> v(n);
  d.download(v.data(), n * sizeof(T));
  return v;
}

// n normal(0, sd) floats from `seed`.
inline std::vector<float> random_floats(std::size_t n, unsigned seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  return x;
}

// A fixture whose tests are skipped, with the reason, without a device.
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = kernels::cuda_device_missing();
    if (!missing.empty()) GTEST_SKIP() << missing;
  }
};

}  // namespace kvtier::cuda_test_util
