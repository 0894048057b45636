#include "kernels/layernorm.h"

#include "kernels/parallel_ranges.h"

namespace kvtier::kernels {

void layernorm(float* out, const float* inp, const float* weight, const float* bias, int M, int C,
               float eps) {
  const bool parallel = static_cast<long>(M) * C >= kParallelElements;
  parallel_ranges(M, 8, parallel, [=](long first, long last) {
    for (long m = first; m < last; ++m) {
      const float* x = inp + m * C;
      float* y = out + m * C;
      double sum = 0.0;
      for (int i = 0; i < C; ++i) sum += x[i];
      const double mean = layernorm_mean(sum, C);
      double var = 0.0;
      for (int i = 0; i < C; ++i) var += layernorm_sq_dev(x[i], mean);
      const float rstd = layernorm_rstd(var, C, eps);
      const float mu = static_cast<float>(mean);
      for (int i = 0; i < C; ++i) {
        const float n = layernorm_element(x[i], mu, rstd, weight[i]);
        y[i] = bias ? n + bias[i] : n;
      }
    }
  });
}

}  // namespace kvtier::kernels
