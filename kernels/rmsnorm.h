// RMS norm without a weight, over the last dimension: nanochat's norm(x),
// PyTorch's F.rms_norm(x, (C,)) with eps left at its default (float32's
// machine epsilon, 2^-23, for fp32 compute).
//
// Per row x of C floats:
//   ms   = (sum of x_i^2 in double, in index order) / C
//   rstd = (float)(1 / sqrt(ms + eps))     (IEEE double sqrt and division)
//   y_i  = x_i * rstd                      (float)
// A row's result depends on that row alone, whatever the batch.
#pragma once

namespace kvtier::kernels {

inline constexpr float kRmsNormEps = 1.1920928955078125e-07f;  // 2^-23

// y (rows x C) = rmsnorm of each row of x; y may be x.
void rmsnorm(float* y, const float* x, long rows, int C, float eps = kRmsNormEps);

// The same over `rows` vectors of C floats `stride` floats apart (a head's
// slice of q or k in a wider row), in place.
void rmsnorm_strided(float* x, long rows, int C, long stride, float eps = kRmsNormEps);

}  // namespace kvtier::kernels
