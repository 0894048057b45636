// The rotary kernel: grid-stride over (row, head, pair) (see
// kernels/cuda/rotary_cuda.h).
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/rotary_cuda.h"
#include "kernels/rotary.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

__global__ void __launch_bounds__(kElementThreads)
    rotary_kernel(float* x, long row_stride, int heads, int half, const int* positions,
                  const float* cos, const float* sin, long n) {
  for (long e = blockIdx.x * long{blockDim.x} + threadIdx.x; e < n;
       e += long{gridDim.x} * blockDim.x) {
    const long r = e / (static_cast<long>(heads) * half);
    const int rest = static_cast<int>(e % (static_cast<long>(heads) * half));
    const int h = rest / half, j = rest % half;
    float* x1 = x + r * row_stride + static_cast<long>(h) * 2 * half;
    const long t = static_cast<long>(positions[r]) * half + j;
    rotary_element(x1[j], x1[j + half], cos[t], sin[t]);
  }
}

}  // namespace

cudaError_t rotary_cuda(float* x, long row_stride, int heads, int head_dim, const int* positions,
                        const float* cos, const float* sin, int rows, cudaStream_t stream) {
  if (rows < 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) return cudaErrorInvalidValue;
  const long n = static_cast<long>(rows) * heads * (head_dim / 2);
  if (n == 0) return cudaSuccess;
  rotary_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(
      x, row_stride, heads, head_dim / 2, positions, cos, sin, n);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
