#include "kernels/residual.h"

#include "kernels/parallel_ranges.h"

namespace kvtier::kernels {

void residual_add(float* out, const float* a, const float* b, long n) {
  parallel_ranges(n, kElementGrain, n >= kParallelElements, [=](long begin, long end) {
    for (long i = begin; i < end; ++i) out[i] = residual_element(a[i], b[i]);
  });
}

}  // namespace kvtier::kernels
