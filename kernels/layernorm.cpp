#include "kernels/layernorm.h"

#include <algorithm>

#include "kernels/parallel_ranges.h"

namespace kvtier::kernels {
namespace {

// Rows whose double sums advance side by side: each row's sum is one chain
// of adds in index order (its bits), and a chain waits on every add, so
// kRows independent chains keep the adder busy where one would not.
constexpr int kRows = 4;

// Rows [first, first + R) of the LayerNorm, R <= kRows.
template <int R>
void layernorm_rows(float* out, const float* inp, const float* weight, const float* bias,
                    long first, int C, float eps) {
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = inp + (first + r) * C;
  double sum[R], var[R], mean[R];
  for (int r = 0; r < R; ++r) sum[r] = var[r] = 0.0;
  for (int i = 0; i < C; ++i)
    for (int r = 0; r < R; ++r) sum[r] += x[r][i];
  for (int r = 0; r < R; ++r) mean[r] = layernorm_mean(sum[r], C);
  for (int i = 0; i < C; ++i)
    for (int r = 0; r < R; ++r) var[r] += layernorm_sq_dev(x[r][i], mean[r]);
  for (int r = 0; r < R; ++r) {
    const float rstd = layernorm_rstd(var[r], C, eps);
    const float mu = static_cast<float>(mean[r]);
    float* y = out + (first + r) * C;
    for (int i = 0; i < C; ++i) {
      const float n = layernorm_element(x[r][i], mu, rstd, weight[i]);
      y[i] = bias ? n + bias[i] : n;
    }
  }
}

}  // namespace

void layernorm(float* out, const float* inp, const float* weight, const float* bias, int M, int C,
               float eps) {
  const bool parallel = static_cast<long>(M) * C >= kParallelElements;
  parallel_ranges(M, 8, parallel, [=](long first, long last) {
    long m = first;
    for (; m + kRows <= last; m += kRows) layernorm_rows<kRows>(out, inp, weight, bias, m, C, eps);
    for (; m < last; ++m) layernorm_rows<1>(out, inp, weight, bias, m, C, eps);
  });
}

}  // namespace kvtier::kernels
