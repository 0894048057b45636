// Paged attention on the GPU: the kernels of kernels/paged_attention.h, for
// decode batches and prefill chunks alike: writing a batch's keys and
// values into their pages, and attention over them. One thread block of
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

// The keys and values of a batch's rows into their pages: the kernel of
// kv_write_rows_reference (kernels/paged_attention.h), one thread per
// element. Run it before paged_attention_cuda on the same rows. blocks,
// row_table, row_pos, k and v are device memory. Asynchronous on `stream`;
// returns the launch status (cudaErrorInvalidValue for a bad shape).
cudaError_t kv_write_rows_cuda(float* const* blocks, const int* row_table, const int* row_pos,
                               int n_rows, const KvShape& shape, int layer, const float* k,
                               const float* v, long stride, cudaStream_t stream);

}  // namespace kvtier::kernels
