// LayerNorm on the GPU: the kernel of kernels/layernorm.h (same element
// functions, mean and variance summed in double). One thread block of
// kLayerNormThreads per row: thread j sums elements j, j + kLayerNormThreads,
// ... in increasing index, then the block adds the threads' sums in a fixed
// tree (cuda/reduce.cuh). The block size is fixed, so a row's result depends
// on that row alone: not on M, the other rows or the launch.
//
// out, inp (M, C), weight and bias (C) are device memory; bias may be null;
// out may alias inp. Asynchronous on `stream`; returns the launch status
// (cudaErrorInvalidValue when M < 0 or C <= 0). M may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

inline constexpr int kLayerNormThreads = 256;

cudaError_t layernorm_cuda(float* out, const float* inp, const float* weight, const float* bias,
                           int M, int C, float eps, cudaStream_t stream);

}  // namespace kvtier::kernels
