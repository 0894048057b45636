// The element-wise steps of kernels/elementwise.h on the GPU: the same
// element functions (ReLU² and the scaled sum give the CPU's bits; softcap
// uses CUDA's tanhf, within a few ulp of libm's).
//
// Arrays are n floats of device memory. Asynchronous on `stream`; returns
// the launch status (cudaErrorInvalidValue when n < 0). n may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

cudaError_t relu_squared_cuda(float* x, long n, cudaStream_t stream);

cudaError_t softcap_cuda(float* z, long n, float cap, cudaStream_t stream);

// out = a * x + b * y; out may be x or y.
cudaError_t scale_add_cuda(float* out, float a, const float* x, float b, const float* y, long n,
                           cudaStream_t stream);

}  // namespace kvtier::kernels
