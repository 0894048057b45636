// The LayerNorm kernel: thread block m normalises row m (see
// kernels/layernorm.h for the arithmetic, kernels/cuda/layernorm_cuda.h for
// the reduction order).
#include "kernels/cuda/layernorm_cuda.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace kvtier::kernels {
namespace {

// Every read of the row (both sums) is done before the second reduction's
// barrier, and each output element is written by the thread that reads that
// input element last, so out may alias inp.
__global__ void __launch_bounds__(kLayerNormThreads)
    layernorm_kernel(float* out, const float* inp, const float* weight, const float* bias, int C,
                     float eps) {
  __shared__ double scratch[32];
  const long m = blockIdx.x;
  const float* x = inp + m * C;
  float* y = out + m * C;
  double sum = 0.0;
  for (int i = threadIdx.x; i < C; i += kLayerNormThreads) sum += x[i];
  sum = cuda_detail::block_reduce(sum, 0.0, cuda_detail::SumOp{}, scratch);
  const double mean = layernorm_mean(sum, C);
  double var = 0.0;
  for (int i = threadIdx.x; i < C; i += kLayerNormThreads) var += layernorm_sq_dev(x[i], mean);
  var = cuda_detail::block_reduce(var, 0.0, cuda_detail::SumOp{}, scratch);
  const float rstd = layernorm_rstd(var, C, eps);
  const float mu = static_cast<float>(mean);
  for (int i = threadIdx.x; i < C; i += kLayerNormThreads) {
    const float n = layernorm_element(x[i], mu, rstd, weight[i]);
    y[i] = bias ? n + bias[i] : n;
  }
}

}  // namespace

cudaError_t layernorm_cuda(float* out, const float* inp, const float* weight, const float* bias,
                           int M, int C, float eps, cudaStream_t stream) {
  if (M < 0 || C <= 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  layernorm_kernel<<<static_cast<unsigned>(M), kLayerNormThreads, 0, stream>>>(out, inp, weight,
                                                                               bias, C, eps);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
