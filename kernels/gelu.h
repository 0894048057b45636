// GELU activation, in place. The form comes from the model's config:
// nanoGPT uses the exact erf form, Hugging Face GPT-2 "gelu_new" the tanh one.
//
// The element functions below are the whole arithmetic; the CPU reference
// (gelu.cpp) and the CUDA kernels (cuda/gelu.cu) call them. They use only
// +, -, *, / and vec_math.h's verf / vtanh (no libm, no fused operation), so
// the two sides are expected to give the same bits.
#pragma once

#include "kernels/host_device.h"
#include "kernels/vec_math.h"

namespace kvtier::kernels {

// 0.5 x (1 + erf(x / sqrt 2)).
KVTIER_HD inline float gelu_erf_element(float x) {
  return 0.5f * x * (1.0f + verf(x * 0.70710678118654752f));
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
KVTIER_HD inline float gelu_tanh_element(float x) {
  const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + vtanh(inner));
}

// x = gelu_erf_element(x), n elements.
void gelu_erf(float* x, long n);

// x = gelu_tanh_element(x), n elements.
void gelu_tanh(float* x, long n);

}  // namespace kvtier::kernels
