// kernels/gated_rows.h on the GPU. gated_add_rows_cuda: one thread block
// per row; threads g < groups compute the row's gates (gate_element, the
// CPU's order) into shared memory, then every thread adds its elements, so
// the CPU's arithmetic element for element (the sigmoid's expf is CUDA's,
// within a few ulp of libm's). gather_rows_cuda: one thread per element,
// the table's bits.
//
// Every array in `g`, and out, table and ids, are device memory.
// Asynchronous on `stream`; returns the launch status
// (cudaErrorInvalidValue for a bad shape: negative rows, groups above
// kGatedRowsMaxGroups, width or channels not positive). rows may be 0.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/gated_rows.h"

namespace kvtier::kernels {

cudaError_t gated_add_rows_cuda(const GatedRows& g, cudaStream_t stream);

cudaError_t gather_rows_cuda(float* out, const float* table, const int* ids, int rows, int width,
                             cudaStream_t stream);

}  // namespace kvtier::kernels
