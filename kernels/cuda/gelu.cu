// The GELU kernels: element-wise, grid-stride (see kernels/gelu.h).
#include "kernels/cuda/gelu_cuda.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/gelu.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

__global__ void __launch_bounds__(kElementThreads) gelu_erf_kernel(float* x, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    x[i] = gelu_erf_element(x[i]);
}

__global__ void __launch_bounds__(kElementThreads) gelu_tanh_kernel(float* x, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    x[i] = gelu_tanh_element(x[i]);
}

}  // namespace

cudaError_t gelu_erf_cuda(float* x, long n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  gelu_erf_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t gelu_tanh_cuda(float* x, long n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  gelu_tanh_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
