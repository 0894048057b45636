// The element-wise kernels: grid-stride (see kernels/cuda/elementwise_cuda.h).
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/elementwise.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

__global__ void __launch_bounds__(kElementThreads) relu_squared_kernel(float* x, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    x[i] = relu_squared_element(x[i]);
}

__global__ void __launch_bounds__(kElementThreads) softcap_kernel(float* z, long n, float cap) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    z[i] = softcap_element(z[i], cap);
}

__global__ void __launch_bounds__(kElementThreads)
    scale_add_kernel(float* out, float a, const float* x, float b, const float* y, long n) {
  for (long i = blockIdx.x * long{blockDim.x} + threadIdx.x; i < n;
       i += long{gridDim.x} * blockDim.x)
    out[i] = a * x[i] + b * y[i];
}

}  // namespace

cudaError_t relu_squared_cuda(float* x, long n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  relu_squared_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t softcap_cuda(float* z, long n, float cap, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  softcap_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(z, n, cap);
  return cudaGetLastError();
}

cudaError_t scale_add_cuda(float* out, float a, const float* x, float b, const float* y, long n,
                           cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  scale_add_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(out, a, x, b, y,
                                                                                   n);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
