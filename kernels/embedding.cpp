#include "kernels/embedding.h"

namespace kvtier::kernels {

void embedding(float* out, const int* tokens, const int* positions, const float* wte,
               const float* wpe, int M, int C) {
  for (int m = 0; m < M; ++m) {
    const float* te = wte + static_cast<long>(tokens[m]) * C;
    const float* pe = wpe + static_cast<long>(positions[m]) * C;
    float* y = out + static_cast<long>(m) * C;
    for (int i = 0; i < C; ++i) y[i] = embedding_element(te[i], pe[i]);
  }
}

}  // namespace kvtier::kernels
