// The input embedding on the GPU: the kernel of kernels/embedding.h (same
// element function: the CPU's bits). One thread block per row.
//
// out (M, C), tokens and positions (M), wte (V, C) and wpe (T, C) are device
// memory; the token and position REQUIREs of embedding() hold. Asynchronous
// on `stream`; returns the launch status (cudaErrorInvalidValue when M < 0 or
// C <= 0). M may be 0.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

cudaError_t embedding_cuda(float* out, const int* tokens, const int* positions, const float* wte,
                           const float* wpe, int M, int C, cudaStream_t stream);

}  // namespace kvtier::kernels
