// The residual add kernel: element-wise, grid-stride (see kernels/residual.h).
#include "kernels/cuda/grid.cuh"
#include "kernels/cuda/residual_cuda.h"
#include "kernels/residual.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

// Each element is read and written by one thread, so out may alias a or b.
__global__ void __launch_bounds__(kElementThreads)
    residual_add_kernel(float* out, const float* a, const float* b, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    out[i] = residual_element(a[i], b[i]);
}

}  // namespace

cudaError_t residual_add_cuda(float* out, const float* a, const float* b, long n,
                              cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  residual_add_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(out, a, b, n);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
