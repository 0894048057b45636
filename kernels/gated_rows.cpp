#include "kernels/gated_rows.h"

#include <algorithm>
#include <vector>

#include "kernels/elementwise.h"

namespace kvtier::kernels {

void gated_add_rows(const GatedRows& g) {
#pragma omp parallel
  {
    std::vector<float> gates(g.groups);
#pragma omp for schedule(static)
    for (int r = 0; r < g.rows; ++r) {
      if (g.skip != nullptr && g.skip[r] < 0) continue;
      const float* in = g.gate_in + r * g.gate_in_stride;
      for (int k = 0; k < g.groups; ++k)
        gates[k] = gate_element(in, g.gate_weight + static_cast<long>(k) * g.gate_channels,
                                g.gate_channels, g.scale);
      const long s = g.src_row != nullptr ? g.src_row[r] : r;
      float* out = g.out + r * g.out_stride;
      const float* src = g.src + s * g.src_stride;
      for (int k = 0; k < g.groups; ++k)
        for (int i = 0; i < g.width; ++i) {
          const long e = static_cast<long>(k) * g.width + i;
          out[e] += gates[k] * src[e];
        }
    }
  }
}

void gather_rows(float* out, const float* table, const int* ids, int rows, int width) {
  for (int r = 0; r < rows; ++r) {
    float* y = out + static_cast<long>(r) * width;
    if (ids[r] < 0)
      std::fill_n(y, width, 0.0f);
    else
      std::copy_n(table + static_cast<long>(ids[r]) * width, width, y);
  }
}

}  // namespace kvtier::kernels
