// int8 quantisation of a KV block, for the quantised lower tiers
// (l2_format / l3_format = int8) and their CUDA kernels.
//
// Shapes: see kernels/kv_shape.h. A block is R = 2 L Hkv head runs of D P
// floats in (layer, K|V, head) order; each run gets one scale:
//   scale = absmax(run) / 127 (see kv_quant_scale),  q = round-to-nearest-even(x / scale) in [-127,
//   127], x' = q * scale.
// Symmetric (no zero point), so exact zeros stay exact and an all-zero run
// has scale 0 and decodes to zeros.
//
// Encoded block, one contiguous byte range (one copy or one I/O per block):
//   [ R float scales | L * 2 * Hkv * D * P int8 values, same order as the floats ]
// = 4 R + floats_per_block bytes: a quarter of the fp32 bytes plus the scales
// (GPT-2 124M, P=16: 1152 + 294912 bytes for 1179648 fp32 bytes).
//
// Error: |x - x'| <= scale / 2 per element, up to float rounding (scale *
// 2^-16), for runs whose absmax is at least 127 * FLT_MIN (below that the
// scale is subnormal and precision degrades, still within absmax).
// REQUIRES: finite inputs.
//
// The element functions below are the whole arithmetic; the CPU reference
// (kv_quant.cpp) and the CUDA kernels (cuda/kv_quant.cu) call them, and give
// the same bytes (max, one IEEE division, rint and one multiplication: no
// fused or approximate operation on either side).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/kv_shape.h"

namespace kvtier::kernels {

// One step of a run's absmax: max(m, |x|). Order-independent (exact).
KVTIER_HD inline float kv_quant_absmax_step(float m, float x) { return fmaxf(m, fabsf(x)); }

// The scale of a run whose largest magnitude is absmax: absmax / 127, one
// ulp lower in the one case where 127 * that rounds past FLT_MAX (absmax
// within an ulp or so of FLT_MAX), so every decoded value stays finite.
KVTIER_HD inline float kv_quant_scale(float absmax) {
  const float scale = absmax / 127.0f;
  return scale * 127.0f > FLT_MAX ? nextafterf(scale, 0.0f) : scale;
}

// x to int8 under `scale`; 0 when scale is 0 (an all-zero run).
KVTIER_HD inline std::int8_t kv_quantize(float x, float scale) {
  if (scale == 0.0f) return 0;
  float y = rintf(x / scale);  // nearest, ties to even (default rounding mode)
  y = y > 127.0f ? 127.0f : y;
  y = y < -127.0f ? -127.0f : y;
  return static_cast<std::int8_t>(y);
}

KVTIER_HD inline float kv_dequantize(std::int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

// Bytes of an encoded block: 4 * runs_per_block() + floats_per_block().
inline std::size_t kv_quant_bytes(const KvShape& shape) {
  return sizeof(float) * static_cast<std::size_t>(shape.runs_per_block()) +
         static_cast<std::size_t>(shape.floats_per_block());
}

// The two parts of an encoded block. REQUIRES: block 4-byte aligned.
KVTIER_HD inline float* kv_quant_scales(void* block) { return static_cast<float*>(block); }
KVTIER_HD inline const float* kv_quant_scales(const void* block) {
  return static_cast<const float*>(block);
}
KVTIER_HD inline std::int8_t* kv_quant_values(void* block, const KvShape& shape) {
  return static_cast<std::int8_t*>(block) + sizeof(float) * shape.runs_per_block();
}
KVTIER_HD inline const std::int8_t* kv_quant_values(const void* block, const KvShape& shape) {
  return static_cast<const std::int8_t*>(block) + sizeof(float) * shape.runs_per_block();
}

// Encodes the fp32 block at src (floats_per_block() floats) into dst
// (kv_quant_bytes() bytes). REQUIRES: dst 4-byte aligned, no overlap.
void quantize_block(const float* src, const KvShape& shape, void* dst);

// Decodes an encoded block into floats_per_block() floats at dst.
void dequantize_block(const void* src, const KvShape& shape, float* dst);

}  // namespace kvtier::kernels
