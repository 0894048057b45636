// Rotary position embeddings on the GPU, in place: RotaryTable::apply
// (kernels/rotary.h) for a batch of rows, one thread per pair; the same
// element function, so the CPU's bits.
//
// Row r's `heads` heads of head_dim floats start at x + r * row_stride and
// are rotated for position positions[r]; cos and sin are the table's
// (positions, head_dim / 2) arrays (RotaryTable::cos(0), sin(0)) copied to
// the device. All device memory. Asynchronous on `stream`; returns the
// launch status (cudaErrorInvalidValue for a bad shape: rows < 0, heads
// or head_dim not positive, head_dim odd). rows may be 0.
// REQUIRES: every position is inside the table.
#pragma once

#include <cuda_runtime_api.h>

namespace kvtier::kernels {

cudaError_t rotary_cuda(float* x, long row_stride, int heads, int head_dim, const int* positions,
                        const float* cos, const float* sin, int rows, cudaStream_t stream);

}  // namespace kvtier::kernels
