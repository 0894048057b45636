// int8 quantisation of KV blocks on the GPU: the kernels of kernels/kv_quant.h
// (same format, same element functions, same bytes as quantize_block /
// dequantize_block).
//
// Arrays of block pointers, the pointers and the blocks are all device
// memory. Asynchronous on `stream`; the return value is the launch status
// (cudaErrorInvalidValue for a bad shape). n_blocks may be 0.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/kv_shape.h"

namespace kvtier::kernels {

// dst[i] (kv_quant_bytes(shape) bytes, 4-byte aligned) = the encoding of
// the fp32 block src[i] (floats_per_block() floats), i < n_blocks.
cudaError_t quantize_blocks_cuda(void* const* dst, const float* const* src, int n_blocks,
                                 const KvShape& shape, cudaStream_t stream);

// dst[i] = the decoding of the encoded block src[i].
cudaError_t dequantize_blocks_cuda(float* const* dst, const void* const* src, int n_blocks,
                                   const KvShape& shape, cudaStream_t stream);

}  // namespace kvtier::kernels
