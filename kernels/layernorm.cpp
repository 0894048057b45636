#include "kernels/layernorm.h"

#include <cmath>

namespace kvtier::kernels {

void layernorm(float* out, const float* inp, const float* weight, const float* bias, int M, int C,
               float eps) {
  for (int m = 0; m < M; ++m) {
    const float* x = inp + static_cast<long>(m) * C;
    float* y = out + static_cast<long>(m) * C;
    double sum = 0.0;
    for (int i = 0; i < C; ++i) sum += x[i];
    const double mean = sum / C;
    double var = 0.0;
    for (int i = 0; i < C; ++i) {
      const double d = x[i] - mean;
      var += d * d;
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(var / C + eps));
    const float mu = static_cast<float>(mean);
    for (int i = 0; i < C; ++i) {
      const float n = (x[i] - mu) * rstd * weight[i];
      y[i] = bias ? n + bias[i] : n;
    }
  }
}

}  // namespace kvtier::kernels
