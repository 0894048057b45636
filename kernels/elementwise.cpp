#include "kernels/elementwise.h"

namespace kvtier::kernels {

void relu_squared(float* x, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) x[i] = relu_squared_element(x[i]);
}

void softcap(float* z, long n, float cap) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) z[i] = softcap_element(z[i], cap);
}

void scale_add(float* out, float a, const float* x, float b, const float* y, long n) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) out[i] = a * x[i] + b * y[i];
}

}  // namespace kvtier::kernels
