// The GPT-2 input embedding: token embedding plus position embedding. The
// engine's, and the reference for the CUDA kernel (cuda/embedding.cu).
//
// Letters: M rows, C = n_embd, V = vocab size, T = context (positions).
#pragma once

#include "kernels/host_device.h"

namespace kvtier::kernels {

// One element of a row: token embedding plus position embedding (one float
// addition, the same bits everywhere).
KVTIER_HD inline float embedding_element(float te, float pe) { return te + pe; }

// out (M, C): row m = wte[tokens[m]] + wpe[positions[m]]. wte is (V, C), wpe
// (T, C); tokens and positions are (M).
// REQUIRES: 0 <= tokens[m] < V, 0 <= positions[m] < T (not checked: the
// engine checks its batch first); out does not overlap wte or wpe.
void embedding(float* out, const int* tokens, const int* positions, const float* wte,
               const float* wpe, int M, int C);

}  // namespace kvtier::kernels
