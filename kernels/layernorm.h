// LayerNorm over the last dimension: the engine's, and the reference for the
// CUDA kernel (cuda/layernorm.cu), sharing the element functions below.
//
// Per row x of C floats:
//   mean = (sum of x_i in double) / C
//   var  = (sum of (x_i - mean)^2 in double) / C
//   mu = (float)mean,  rstd = (float)(1 / sqrt(var + eps))   (IEEE double sqrt and division)
//   y_i  = (x_i - mu) * rstd * w_i  [+ b_i]                 (float, no fused operation)
// The CPU sums in index order; the kernel in a fixed tree per row. Both sums
// are double, so the two usually round to the same mu and rstd and the
// outputs agree to within an ulp or so of float, not always in bits. Either
// way a row's result depends on that row alone.
#pragma once

#include <cmath>

#include "kernels/host_device.h"

namespace kvtier::kernels {

// mean from the double sum of a row's C values.
KVTIER_HD inline double layernorm_mean(double sum, int C) { return sum / C; }

// One term of the variance sum: (x - mean)^2 in double.
KVTIER_HD inline double layernorm_sq_dev(float x, double mean) {
  const double d = x - mean;
  return d * d;
}

// 1 / sqrt(var + eps) from the double sum of squared deviations, as a float.
KVTIER_HD inline float layernorm_rstd(double sq_dev_sum, int C, float eps) {
  return static_cast<float>(1.0 / sqrt(sq_dev_sum / C + eps));
}

// The normalised, scaled value of one element (bias added by the caller, so
// that a null bias leaves the bits, -0 included, as they are).
KVTIER_HD inline float layernorm_element(float x, float mu, float rstd, float w) {
  return (x - mu) * rstd * w;
}

// out (M, C) = (inp - mean) / sqrt(var + eps) * weight + bias, per row.
// weight and bias are (C); bias may be null. Mean and variance accumulate in
// double, in index order, so a row's result depends on that row alone.
// out may alias inp.
void layernorm(float* out, const float* inp, const float* weight, const float* bias, int M, int C,
               float eps);

}  // namespace kvtier::kernels
