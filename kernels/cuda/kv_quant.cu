// The int8 KV kernels: one thread block per head run (see kernels/kv_quant.h).
#include "kernels/cuda/kv_quant_cuda.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/kv_quant.h"

namespace kvtier::kernels {
namespace {

constexpr int kThreads = 256;

// Block (blockIdx.x / runs), run (blockIdx.x % runs): absmax over the run
// (exact in any order), its scale, then each element.
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(void* const* dst, const float* const* src, KvShape shape) {
  __shared__ float scratch[32];
  const long runs = shape.runs_per_block(), n = shape.floats_per_run();
  const long b = blockIdx.x / runs, r = blockIdx.x % runs;
  const float* x = src[b] + r * n;
  float absmax = 0.0f;
  for (long i = threadIdx.x; i < n; i += blockDim.x) absmax = kv_quant_absmax_step(absmax, x[i]);
  absmax = cuda_detail::block_reduce(absmax, 0.0f, cuda_detail::MaxOp{}, scratch);
  const float scale = kv_quant_scale(absmax);
  if (threadIdx.x == 0) kv_quant_scales(dst[b])[r] = scale;
  std::int8_t* q = kv_quant_values(dst[b], shape) + r * n;
  for (long i = threadIdx.x; i < n; i += blockDim.x) q[i] = kv_quantize(x[i], scale);
}

__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(float* const* dst, const void* const* src, KvShape shape) {
  const long runs = shape.runs_per_block(), n = shape.floats_per_run();
  const long b = blockIdx.x / runs, r = blockIdx.x % runs;
  const float scale = kv_quant_scales(src[b])[r];
  const std::int8_t* q = kv_quant_values(src[b], shape) + r * n;
  float* x = dst[b] + r * n;
  for (long i = threadIdx.x; i < n; i += blockDim.x) x[i] = kv_dequantize(q[i], scale);
}

bool valid(const KvShape& s, int n_blocks) {
  const long grid = static_cast<long>(n_blocks) * s.runs_per_block();
  return n_blocks >= 0 && s.n_layer > 0 && s.n_kv_head > 0 && s.head_dim > 0 && s.page_size > 0 &&
         grid < (1L << 31);
}

}  // namespace

cudaError_t quantize_blocks_cuda(void* const* dst, const float* const* src, int n_blocks,
                                 const KvShape& shape, cudaStream_t stream) {
  if (!valid(shape, n_blocks)) return cudaErrorInvalidValue;
  if (n_blocks == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n_blocks * shape.runs_per_block());
  quantize_kernel<<<grid, kThreads, 0, stream>>>(dst, src, shape);
  return cudaGetLastError();
}

cudaError_t dequantize_blocks_cuda(float* const* dst, const void* const* src, int n_blocks,
                                   const KvShape& shape, cudaStream_t stream) {
  if (!valid(shape, n_blocks)) return cudaErrorInvalidValue;
  if (n_blocks == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n_blocks * shape.runs_per_block());
  dequantize_kernel<<<grid, kThreads, 0, stream>>>(dst, src, shape);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
