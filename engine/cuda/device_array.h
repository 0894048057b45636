// What the GPU forwards (cuda_model.h, cuda_nanochat_model.h) share: a
// growable device array, and the macro that turns a failed CUDA call into
// the message a forward returns. Internal to engine/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "tiers/cuda/cuda_error.h"

// Returns the failed call and the runtime's message from a function that
// returns std::expected<..., std::string>.
#define KVTIER_CUDA_TRY(call)                                                 \
  do {                                                                        \
    if (const cudaError_t kvtier_err = (call); kvtier_err != cudaSuccess)     \
      return std::unexpected(::kvtier::tiers::cuda_error(#call, kvtier_err)); \
  } while (0)

namespace kvtier {

// A growable device array of T: reserve(n) keeps the contents only while
// it does not grow (a forward's scratch, rewritten every call).
template <typename T>
struct DeviceArray {
  T* data = nullptr;
  std::size_t size = 0;

  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { (void)cudaFree(data); }

  cudaError_t reserve(std::size_t n) {
    if (n <= size) return cudaSuccess;
    const std::size_t grown = std::max(n, size * 2);  // amortised growth
    (void)cudaFree(data);
    data = nullptr;
    size = 0;
    if (const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&data), grown * sizeof(T));
        err != cudaSuccess) {
      data = nullptr;
      return err;
    }
    size = grown;
    return cudaSuccess;
  }
};

}  // namespace kvtier
