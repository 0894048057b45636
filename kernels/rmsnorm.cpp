#include "kernels/rmsnorm.h"

#include <cmath>

namespace kvtier::kernels {
namespace {

void rmsnorm_row(float* y, const float* x, int C, float eps) {
  double sum = 0.0;
  for (int i = 0; i < C; ++i) sum += static_cast<double>(x[i]) * x[i];
  const auto rstd = static_cast<float>(1.0 / std::sqrt(sum / C + eps));
  for (int i = 0; i < C; ++i) y[i] = x[i] * rstd;
}

}  // namespace

void rmsnorm(float* y, const float* x, long rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) rmsnorm_row(y + r * C, x + r * C, C, eps);
}

void rmsnorm_strided(float* x, long rows, int C, long stride, float eps) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) rmsnorm_row(x + r * stride, x + r * stride, C, eps);
}

}  // namespace kvtier::kernels
