// Paged attention on the GPU: the kernel of kernels/paged_attention.h, for
// decode batches and prefill chunks alike. One thread block of
// kAttentionTile threads per (row, head); each tile of keys is scored one
// key per thread, reduced in a fixed order, and accumulated into the
// output one dimension per thread.
//
// out, q (R, H, D) and every array in `rows` (blocks, row_table, row_pos)
// are device memory. Asynchronous on `stream`; returns the launch status
// (cudaErrorInvalidValue when head_dim > kAttentionMaxHeadDim or n_head is
// not a multiple of n_kv_head).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/paged_attention.h"

namespace kvtier::kernels {

cudaError_t paged_attention_cuda(float* out, const float* q, const PagedAttentionRows& rows,
                                 cudaStream_t stream);

}  // namespace kvtier::kernels
