#include "kernels/paged_attention.h"

#include <algorithm>

namespace kvtier::kernels {

void kv_write_rows_reference(float* const* blocks, const int* row_table, const int* row_pos,
                             int n_rows, const KvShape& shape, int layer, const float* k,
                             const float* v, long stride) {
  const int P = shape.page_size, width = shape.n_kv_head * shape.head_dim;
  for (int r = 0; r < n_rows; ++r) {
    float* block = blocks[row_table[r] + row_pos[r] / P];
    const int slot = row_pos[r] % P;
    for (int i = 0; i < width; ++i) {
      block[kv_key_index(shape, layer, i, slot)] = k[r * stride + i];
      block[kv_value_index(shape, layer, i, slot)] = v[r * stride + i];
    }
  }
}

void paged_attention_reference(float* out, const float* q, const PagedAttentionRows& rows) {
  const int H = rows.n_head, D = rows.head_dim, P = rows.page_size;
  const int group = H / rows.n_kv_head;
  const float scale = attention_scale(D);
  float s[kAttentionTile];
  for (int r = 0; r < rows.n_rows; ++r) {
    const float* const* table = rows.blocks + rows.row_table[r];
    const int keys = rows.row_pos[r] + 1;
    for (int h = 0; h < H; ++h) {
      const int kvh = h / group;
      const float* qh = q + (static_cast<long>(r) * H + h) * D;
      float* o = out + (static_cast<long>(r) * H + h) * D;
      std::fill(o, o + D, 0.0f);
      SoftmaxRun run;
      for (int t0 = attention_first_key(rows.row_pos[r], rows.window); t0 < keys;
           t0 += kAttentionTile) {
        const int n = std::min(kAttentionTile, keys - t0);
        float tile_max = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const int t = t0 + j;
          const float* block = table[t / P];
          s[j] = -INFINITY;
          if (block == nullptr) continue;
          const float* kp = block + rows.k_offset + static_cast<long>(kvh) * D * P;
          s[j] = attention_key_dot(qh, kp, P, t % P, D) * scale;
          tile_max = std::max(tile_max, s[j]);
        }
        if (tile_max == -INFINITY) continue;  // every key of the tile absent
        const float c = softmax_run_rescale(run, tile_max);
        if (c != 1.0f)
          for (int d = 0; d < D; ++d) o[d] *= c;
        float tile_sum = 0.0f;
        for (int j = 0; j < n; ++j) tile_sum += (s[j] = softmax_weight(s[j], run));
        run.sum += tile_sum;
        for (int j = 0; j < n; ++j) {
          const int t = t0 + j;
          const float* block = table[t / P];
          if (block == nullptr) continue;
          const float* v = block + rows.v_offset + (static_cast<long>(kvh) * P + t % P) * D;
          for (int d = 0; d < D; ++d) o[d] = fmaf(s[j], v[d], o[d]);
        }
      }
      const float inv = 1.0f / run.sum;
      for (int d = 0; d < D; ++d) o[d] *= inv;
    }
  }
}

}  // namespace kvtier::kernels
