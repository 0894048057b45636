#include "kernels/gelu.h"

#include "kernels/parallel_ranges.h"

namespace kvtier::kernels {

void gelu_erf(float* x, long n) {
  parallel_ranges(n, kElementGrain, n >= kParallelElements, [x](long begin, long end) {
    for (long i = begin; i < end; ++i) x[i] = gelu_erf_element(x[i]);
  });
}

void gelu_tanh(float* x, long n) {
  parallel_ranges(n, kElementGrain, n >= kParallelElements, [x](long begin, long end) {
    for (long i = begin; i < end; ++i) x[i] = gelu_tanh_element(x[i]);
  });
}

}  // namespace kvtier::kernels
