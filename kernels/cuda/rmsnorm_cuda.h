// RMS norm without a weight on the GPU: kernels/rmsnorm.h's arithmetic, then
// an optional scale (nanochat's q/k scale: y = (x * rstd) * scale, two
// roundings, as the CPU forward does them). One thread block of
// kRmsNormThreads per row: thread j sums x_i^2 in double for i = j, j +
// kRmsNormThreads, ... in increasing i, then the block adds the threads'
// sums in a fixed tree (cuda/reduce.cuh): a row's result depends on that row
// alone, and agrees with the CPU's (one sum in index order) within an ulp or
// so, not bits.
//
// out, inp (rows, C) are device memory; out may alias inp. Asynchronous on
// `stream`; returns the launch status (cudaErrorInvalidValue when rows < 0,
// C <= 0 or rows does not fit a grid). rows may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

inline constexpr int kRmsNormThreads = 128;

cudaError_t rmsnorm_cuda(float* out, const float* inp, long rows, int C, float eps, float scale,
                         cudaStream_t stream);

}  // namespace kvtier::kernels
