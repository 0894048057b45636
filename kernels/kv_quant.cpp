#include "kernels/kv_quant.h"

namespace kvtier::kernels {

void quantize_block(const float* src, const KvShape& shape, void* dst) {
  const long runs = shape.runs_per_block(), n = shape.floats_per_run();
  float* scales = kv_quant_scales(dst);
  std::int8_t* values = kv_quant_values(dst, shape);
  for (long r = 0; r < runs; ++r) {
    const float* x = src + r * n;
    float absmax = 0.0f;
    for (long i = 0; i < n; ++i) absmax = kv_quant_absmax_step(absmax, x[i]);
    const float scale = kv_quant_scale(absmax);
    scales[r] = scale;
    std::int8_t* q = values + r * n;
    for (long i = 0; i < n; ++i) q[i] = kv_quantize(x[i], scale);
  }
}

void dequantize_block(const void* src, const KvShape& shape, float* dst) {
  const long runs = shape.runs_per_block(), n = shape.floats_per_run();
  const float* scales = kv_quant_scales(src);
  const std::int8_t* values = kv_quant_values(src, shape);
  for (long r = 0; r < runs; ++r) {
    const float scale = scales[r];
    const std::int8_t* q = values + r * n;
    float* x = dst + r * n;
    for (long i = 0; i < n; ++i) x[i] = kv_dequantize(q[i], scale);
  }
}

}  // namespace kvtier::kernels
