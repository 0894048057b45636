// The residual connection: out = a + b, element by element. The engine's,
// and the reference for the CUDA kernel (cuda/residual.cu).
#pragma once

#include "kernels/host_device.h"

namespace kvtier::kernels {

// One element: a + b (one float addition, the same bits everywhere).
KVTIER_HD inline float residual_element(float a, float b) { return a + b; }

// out[i] = a[i] + b[i], i < n. out may alias a or b (the engine adds in
// place: residual_add(x, x, y, n)); no other overlap.
void residual_add(float* out, const float* a, const float* b, long n);

}  // namespace kvtier::kernels
