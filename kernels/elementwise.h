// Element-wise steps of the nanochat forward (notes/nanochat.md §2): the
// MLP's ReLU², the logits' softcap, the lambdas' scaled sums and the
// sigmoid gates. The element functions below are the whole arithmetic; the
// CPU functions (elementwise.cpp) and the CUDA kernels (cuda/elementwise.cu)
// call them. Both sides compile with contraction off (no fused multiply-add
// unless written), so +, -, * give the same bits; sigmoid and softcap call
// expf / tanhf, libm's on the CPU and CUDA's on the GPU, which agree within
// a few ulp, not bits.
#pragma once

#include <cmath>

#include "kernels/host_device.h"

namespace kvtier::kernels {

// max(x, 0)^2.
KVTIER_HD inline float relu_squared_element(float x) { return x > 0.0f ? x * x : 0.0f; }

// cap * tanh(z / cap): nanochat's logit softcap, in fp32.
KVTIER_HD inline float softcap_element(float z, float cap) { return cap * tanhf(z / cap); }

KVTIER_HD inline float sigmoid_element(float x) { return 1.0f / (1.0f + expf(-x)); }

// scale * sigmoid(x[0..n) . w[0..n)), the dot a plain sum in increasing i:
// the gates of smear and of the value embeddings.
KVTIER_HD inline float gate_element(const float* x, const float* w, int n, float scale) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * w[i];
  return scale * sigmoid_element(sum);
}

// x = relu_squared_element(x), n elements.
void relu_squared(float* x, long n);

// z = softcap_element(z, cap), n elements.
void softcap(float* z, long n, float cap);

// out = a * x + b * y, n elements; out may be x or y.
void scale_add(float* out, float a, const float* x, float b, const float* y, long n);

}  // namespace kvtier::kernels
