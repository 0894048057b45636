// Element functions for the kernels: exp, tanh and erf in plain float
// arithmetic.
//
// Why not <cmath>: libm's expf/erff are scalar calls, and in a prefill they
// are called tens of millions of times (softmax, GELU). These are written so
// that the compiler vectorises the loops that call them (in a file built with
// -fno-trapping-math, as kvtier_kernels is: GCC will not otherwise turn their
// branches into selects), and they use only
// +, -, *, / and exact bit manipulation, so every loop that calls them gives
// the same bits for the same input wherever it runs (build with
// -ffp-contract=off, as the project does). Accuracy: exp within 2 ulp; erf
// and tanh within ~2e-7 absolute, well inside the model's tolerances.
//
// They are KVTIER_HD: the CUDA kernels that need them (GELU) call these same
// functions; with nvcc's -fmad=false and IEEE division they are expected to
// give the CPU's bits (not yet checked on a device).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

#if !defined(__CUDACC__)
#include <bit>
#endif

namespace kvtier::kernels {

namespace vec_math_detail {

// rint (nearest, ties to even): GCC's builtin on the CPU, which vectorises
// where std::roundeven does not; CUDA's rintf on the device.
KVTIER_HD inline float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return __builtin_rintf(x);
#endif
}

// The float whose bits are `bits`. nvcc compiles C++17 (no std::bit_cast).
KVTIER_HD inline float float_from_bits(std::int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#elif defined(__CUDACC__)
  return __builtin_bit_cast(float, bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

}  // namespace vec_math_detail

// e^x. Underflows to 0 below -87.3 and clamps its argument to 88 (e^88 = 1.65e38) so it never
// overflows.
KVTIER_HD inline float vexp(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n*ln2 (ln2 split in
  // two parts so the reduction is exact to float precision).
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = vec_math_detail::round_even(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  // Degree-6 Taylor/minimax polynomial for exp(r) on [-ln2/2, ln2/2].
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * vec_math_detail::float_from_bits(bits);
}

// tanh(x) = 1 - 2 / (e^{2x} + 1), odd-symmetric so small |x| keeps precision
// through a short series.
KVTIER_HD inline float vtanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  float t;
  if (ax < 0.0625f) {
    const float x2 = ax * ax;
    t = ax * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  } else {
    t = 1.0f - 2.0f / (vexp(2.0f * ax) + 1.0f);
  }
  return x < 0.0f ? -t : t;
}

// erf(x) from the Chebyshev fit to erfc (relative error < 1.2e-7):
// erfc(z) = t * exp(-z^2 - 1.26551223 + t * P(t)), t = 1 / (1 + z/2).
KVTIER_HD inline float verf(float x) {
  const float z = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  const float erfc = t * vexp(-z * z - 1.26551223f + t * p);
  const float e = 1.0f - erfc;
  return x < 0.0f ? -e : e;
}

}  // namespace kvtier::kernels
