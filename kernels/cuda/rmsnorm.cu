// The RMS norm kernel: thread block m normalises row m (see
// kernels/cuda/rmsnorm_cuda.h).
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rmsnorm_cuda.h"

namespace kvtier::kernels {
namespace {

// Each thread reads its elements for the sum and writes the same elements
// after the reduction's barrier, so out may alias inp.
__global__ void __launch_bounds__(kRmsNormThreads)
    rmsnorm_kernel(float* out, const float* inp, int C, float eps, float scale) {
  __shared__ double scratch[32];
  const long m = blockIdx.x;
  const float* x = inp + m * C;
  float* y = out + m * C;
  double sum = 0.0;
  for (int i = threadIdx.x; i < C; i += kRmsNormThreads) sum += static_cast<double>(x[i]) * x[i];
  sum = cuda_detail::block_reduce(sum, 0.0, cuda_detail::SumOp{}, scratch);
  const auto rstd = static_cast<float>(1.0 / sqrt(sum / C + eps));
  for (int i = threadIdx.x; i < C; i += kRmsNormThreads) {
    const float n = x[i] * rstd;
    y[i] = scale == 1.0f ? n : n * scale;
  }
}

}  // namespace

cudaError_t rmsnorm_cuda(float* out, const float* inp, long rows, int C, float eps, float scale,
                         cudaStream_t stream) {
  if (rows < 0 || C <= 0 || rows >= (1L << 31)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kRmsNormThreads, 0, stream>>>(out, inp, C, eps,
                                                                              scale);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
