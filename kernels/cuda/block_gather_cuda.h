// Block gather/scatter on the GPU: the kernels of kernels/block_gather.h
// (same element functions and semantics: null blocks skipped).
//
// `blocks` is a device array of n_blocks block pointers; the blocks and the
// staging buffer are memory the GPU can address (device memory, or mapped
// pinned host memory). Asynchronous on `stream`; returns the launch status
// (cudaErrorInvalidValue when block_bytes is not a multiple of 16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace kvtier::kernels {

cudaError_t block_gather_cuda(void* staging, const void* const* blocks, int n_blocks,
                              std::size_t block_bytes, cudaStream_t stream);

cudaError_t block_scatter_cuda(void* const* blocks, const void* staging, int n_blocks,
                               std::size_t block_bytes, cudaStream_t stream);

}  // namespace kvtier::kernels
