// LayerNorm over the last dimension.
#pragma once

namespace kvtier::kernels {

// out (M, C) = (inp - mean) / sqrt(var + eps) * weight + bias, per row.
// weight and bias are (C); bias may be null. Mean and variance accumulate in
// double, in index order, so a row's result depends on that row alone.
// out may alias inp.
void layernorm(float* out, const float* inp, const float* weight, const float* bias, int M, int C,
               float eps);

}  // namespace kvtier::kernels
