#include "kernels/gelu.h"

#include "kernels/vec_math.h"

namespace kvtier::kernels {

void gelu_erf(float* x, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + verf(v * 0.70710678118654752f));
  }
}

void gelu_tanh(float* x, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i];
    const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
    x[i] = 0.5f * v * (1.0f + vtanh(inner));
  }
}

}  // namespace kvtier::kernels
