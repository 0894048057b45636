// The residual add on the GPU: the kernel of kernels/residual.h (same
// element function: the CPU's bits).
//
// out, a and b are n floats of device memory; out may alias a or b.
// Asynchronous on `stream`; returns the launch status (cudaErrorInvalidValue
// when n < 0). n may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

cudaError_t residual_add_cuda(float* out, const float* a, const float* b, long n,
                              cudaStream_t stream);

}  // namespace kvtier::kernels
