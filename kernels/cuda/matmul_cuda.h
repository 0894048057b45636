// Matrix multiply on the GPU: the kernel of kernels/matmul.h, under the same
// determinism contract. Each output is one thread's chain of fmas over k in
// increasing k from 0.0f, then + bias; the K dimension is never split. So a
// row's result does not depend on M, on the row's place in the batch or on
// the launch shape, and it equals the CPU's matmul() and matmul_reference()
// bit for bit (tests/cuda_matmul_test.cpp checks both).
//
// Never splitting K caps the parallelism at M x N outputs: a decode step
// (M = 1) runs N chains of K fmas. That is the price of batch invariance.
//
// out (M, N), inp (M, K), weight ((N, K) or (K, N) as `layout` says) and
// bias (N, or null) are device memory; out aliases nothing. Asynchronous on
// `stream`; returns the launch status (cudaErrorInvalidValue when M < 0 or
// K, N <= 0). M may be 0.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/matmul.h"

namespace kvtier::kernels {

cudaError_t matmul_cuda(float* out, const float* inp, const float* weight, const float* bias, int M,
                        int K, int N, WeightLayout layout, cudaStream_t stream);

}  // namespace kvtier::kernels
