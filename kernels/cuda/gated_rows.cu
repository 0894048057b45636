// The gated-rows kernels (see kernels/cuda/gated_rows_cuda.h).
#include "kernels/cuda/gated_rows_cuda.h"
#include "kernels/cuda/grid.cuh"
#include "kernels/elementwise.h"

namespace kvtier::kernels {
namespace {

using cuda_detail::kElementThreads;

__global__ void __launch_bounds__(kElementThreads) gated_add_rows_kernel(GatedRows g) {
  __shared__ float gates[kGatedRowsMaxGroups];
  const int r = blockIdx.x;
  if (g.skip != nullptr && g.skip[r] < 0) return;  // the whole block: no barrier is skipped alone
  const float* in = g.gate_in + r * g.gate_in_stride;
  for (int k = threadIdx.x; k < g.groups; k += blockDim.x)
    gates[k] = gate_element(in, g.gate_weight + static_cast<long>(k) * g.gate_channels,
                            g.gate_channels, g.scale);
  __syncthreads();  // every gate read its input before any output changes
  const long s = g.src_row != nullptr ? g.src_row[r] : r;
  float* out = g.out + r * g.out_stride;
  const float* src = g.src + s * g.src_stride;
  const long n = static_cast<long>(g.groups) * g.width;
  for (long e = threadIdx.x; e < n; e += blockDim.x) out[e] += gates[e / g.width] * src[e];
}

__global__ void __launch_bounds__(kElementThreads)
    gather_rows_kernel(float* out, const float* table, const int* ids, int width, long n) {
  for (long e = blockIdx.x * long{blockDim.x} + threadIdx.x; e < n;
       e += long{gridDim.x} * blockDim.x) {
    const long r = e / width;
    const int i = static_cast<int>(e % width);
    out[e] = ids[r] < 0 ? 0.0f : table[static_cast<long>(ids[r]) * width + i];
  }
}

}  // namespace

cudaError_t gated_add_rows_cuda(const GatedRows& g, cudaStream_t stream) {
  if (g.rows < 0 || g.groups <= 0 || g.groups > kGatedRowsMaxGroups || g.width <= 0 ||
      g.gate_channels <= 0)
    return cudaErrorInvalidValue;
  if (g.rows == 0) return cudaSuccess;
  gated_add_rows_kernel<<<static_cast<unsigned>(g.rows), kElementThreads, 0, stream>>>(g);
  return cudaGetLastError();
}

cudaError_t gather_rows_cuda(float* out, const float* table, const int* ids, int rows, int width,
                             cudaStream_t stream) {
  if (rows < 0 || width <= 0) return cudaErrorInvalidValue;
  const long n = static_cast<long>(rows) * width;
  if (n == 0) return cudaSuccess;
  gather_rows_kernel<<<cuda_detail::element_blocks(n), kElementThreads, 0, stream>>>(out, table,
                                                                                     ids, width, n);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
