// Block gather/scatter kernels: 16-byte words, grid y over blocks, grid x
// striding over a block's words (see kernels/block_gather.h).
#include <algorithm>

#include "kernels/block_gather.h"
#include "kernels/cuda/block_gather_cuda.h"

namespace kvtier::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;
// Enough thread blocks in flight to fill a large GPU (132 SMs x 4).
constexpr long kTargetThreadBlocks = 528;

__global__ void __launch_bounds__(kThreads)
    gather_kernel(void* staging, const void* const* blocks, int n_blocks, std::size_t words) {
  for (std::size_t b = blockIdx.y; b < static_cast<std::size_t>(n_blocks); b += gridDim.y)
    for (std::size_t w = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; w < words;
         w += std::size_t{gridDim.x} * blockDim.x)
      block_gather_word(staging, blocks, words, b, w);
}

__global__ void __launch_bounds__(kThreads)
    scatter_kernel(void* const* blocks, const void* staging, int n_blocks, std::size_t words) {
  for (std::size_t b = blockIdx.y; b < static_cast<std::size_t>(n_blocks); b += gridDim.y)
    for (std::size_t w = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; w < words;
         w += std::size_t{gridDim.x} * blockDim.x)
      block_scatter_word(blocks, staging, words, b, w);
}

dim3 grid_for(int n_blocks, std::size_t words) {
  const long per_block_max = static_cast<long>((words + kThreads - 1) / kThreads);
  const long want = (kTargetThreadBlocks + n_blocks - 1) / n_blocks;
  const long x = std::max(1L, std::min(per_block_max, want));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(std::min(n_blocks, kMaxGridY)));
}

}  // namespace

cudaError_t block_gather_cuda(void* staging, const void* const* blocks, int n_blocks,
                              std::size_t block_bytes, cudaStream_t stream) {
  if (n_blocks < 0 || block_bytes % sizeof(BlockWord) != 0) return cudaErrorInvalidValue;
  if (n_blocks == 0 || block_bytes == 0) return cudaSuccess;
  const std::size_t words = block_bytes / sizeof(BlockWord);
  gather_kernel<<<grid_for(n_blocks, words), kThreads, 0, stream>>>(staging, blocks, n_blocks,
                                                                    words);
  return cudaGetLastError();
}

cudaError_t block_scatter_cuda(void* const* blocks, const void* staging, int n_blocks,
                               std::size_t block_bytes, cudaStream_t stream) {
  if (n_blocks < 0 || block_bytes % sizeof(BlockWord) != 0) return cudaErrorInvalidValue;
  if (n_blocks == 0 || block_bytes == 0) return cudaSuccess;
  const std::size_t words = block_bytes / sizeof(BlockWord);
  scatter_kernel<<<grid_for(n_blocks, words), kThreads, 0, stream>>>(blocks, staging, n_blocks,
                                                                     words);
  return cudaGetLastError();
}

}  // namespace kvtier::kernels
