// GELU on the GPU, in place: the kernels of kernels/gelu.h (same element
// functions, so the CPU's bits are expected).
//
// x is n floats of device memory. Asynchronous on `stream`; returns the
// launch status (cudaErrorInvalidValue when n < 0). n may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

cudaError_t gelu_erf_cuda(float* x, long n, cudaStream_t stream);

cudaError_t gelu_tanh_cuda(float* x, long n, cudaStream_t stream);

}  // namespace kvtier::kernels
