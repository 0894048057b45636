#include "kernels/gelu.h"

namespace kvtier::kernels {

void gelu_erf(float* x, long n) {
  for (long i = 0; i < n; ++i) x[i] = gelu_erf_element(x[i]);
}

void gelu_tanh(float* x, long n) {
  for (long i = 0; i < n; ++i) x[i] = gelu_tanh_element(x[i]);
}

}  // namespace kvtier::kernels
