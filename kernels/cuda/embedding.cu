// The input embedding kernel: thread block m writes row m (see
// kernels/embedding.h).
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/embedding.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

__global__ void __launch_bounds__(kElementThreads)
    embedding_kernel(float* out, const int* tokens, const int* positions, const float* wte,
                     const float* wpe, int C) {
  const long m = blockIdx.x;
  const float* te = wte + static_cast<long>(tokens[m]) * C;
  const float* pe = wpe + static_cast<long>(positions[m]) * C;
  float* y = out + m * C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) y[i] = embedding_element(te[i], pe[i]);
}

}  // namespace

cudaError_t embedding_cuda(float* out, const int* tokens, const int* positions, const float* wte,
                           const float* wpe, int M, int C, cudaStream_t stream) {
  if (M < 0 || C <= 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  embedding_kernel<<<static_cast<unsigned>(M), kElementThreads, 0, stream>>>(out, tokens, positions,
                                                                             wte, wpe, C);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
