#include "kernels/attention.h"

#include <cmath>
#include <vector>

#include "kernels/vec_math.h"

namespace kvtier::kernels {
namespace {

const float* key_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.k_offset + static_cast<long>(kv_head) * kv.head_dim * kv.page_size;
}

const float* value_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.v_offset + static_cast<long>(kv_head) * kv.page_size * kv.head_dim;
}

}  // namespace

void kv_write(const PagedKv& kv, int pos, const float* k, const float* v) {
  const int P = kv.page_size, D = kv.head_dim;
  const int block = pos / P, slot = pos % P;
  for (int h = 0; h < kv.n_kv_head; ++h) {
    float* kp = kv.blocks[block] + kv.k_offset + static_cast<long>(h) * D * P;
    float* vp = kv.blocks[block] + kv.v_offset + static_cast<long>(h) * P * D + slot * D;
    for (int d = 0; d < D; ++d) kp[d * P + slot] = k[h * D + d];
    for (int d = 0; d < D; ++d) vp[d] = v[h * D + d];
  }
}

void attention_rows(float* out, long out_stride, const float* q, long q_stride, int n_rows,
                    int first_pos, const PagedKv& kv, int kv_head, float* scratch) {
  const int P = kv.page_size, D = kv.head_dim;
  const int n = first_pos + n_rows;  // keys the last row sees
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Row r's scores at scratch + r (n + 1); slot n keeps 1 / sum of its softmax.
  auto scores = [&](int r) { return scratch + static_cast<long>(r) * (n + 1); };

  // Scores, a page at a time: s[j] = fma chain over d of q[d] * K[d][j]. Keys
  // past a row's own position are computed and never used.
  for (int start = 0, block = 0; start < n; start += P, ++block) {
    const int len = n - start < P ? n - start : P;
    const float* kp = key_page(kv, block, kv_head);
    for (int r = 0; r < n_rows; ++r) {
      float* s = scores(r) + start;
      for (int j = 0; j < len; ++j) s[j] = 0.0f;
    }
    for (int d = 0; d < D; ++d) {
      const float* kd = kp + d * P;
      for (int r = 0; r < n_rows; ++r) {
        const float qd = q[r * q_stride + d];
        float* s = scores(r) + start;
        for (int j = 0; j < len; ++j) s[j] = __builtin_fmaf(qd, kd[j], s[j]);
      }
    }
  }

  // Softmax of each row over its own keys 0 .. first_pos + r.
  for (int r = 0; r < n_rows; ++r) {
    float* s = scores(r);
    const int keys = first_pos + r + 1;
    for (int t = 0; t < keys; ++t) s[t] *= scale;
    float max = s[0];
    for (int t = 1; t < keys; ++t) max = s[t] > max ? s[t] : max;
    for (int t = 0; t < keys; ++t) s[t] = vexp(s[t] - max);
    float sum = 0.0f;
    for (int t = 0; t < keys; ++t) sum += s[t];
    s[n] = 1.0f / sum;
    float* o = out + r * out_stride;
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
  }

  // Weighted sum of values, position by position, each value row loaded once
  // for every query that sees it.
  for (int start = 0, block = 0; start < n; start += P, ++block) {
    const int len = n - start < P ? n - start : P;
    const float* vp = value_page(kv, block, kv_head);
    for (int j = 0; j < len; ++j) {
      const int t = start + j;
      const float* v = vp + j * D;
      for (int r = t > first_pos ? t - first_pos : 0; r < n_rows; ++r) {
        const float p = scores(r)[t];
        float* o = out + r * out_stride;
        for (int d = 0; d < D; ++d) o[d] = __builtin_fmaf(p, v[d], o[d]);
      }
    }
  }
  for (int r = 0; r < n_rows; ++r) {
    const float inv = scores(r)[n];
    float* o = out + r * out_stride;
    for (int d = 0; d < D; ++d) o[d] *= inv;
  }
}

void attention_row_reference(float* out, const float* q, int pos, const PagedKv& kv, int kv_head) {
  const int P = kv.page_size, D = kv.head_dim;
  std::vector<double> s(pos + 1);
  for (int t = 0; t <= pos; ++t) {
    const float* kp = key_page(kv, t / P, kv_head);
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * kp[d * P + t % P];
    s[t] = dot / std::sqrt(static_cast<double>(D));
  }
  double max = s[0];
  for (double x : s) max = x > max ? x : max;
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - max));
  for (int d = 0; d < D; ++d) {
    double acc = 0.0;
    for (int t = 0; t <= pos; ++t) acc += s[t] * value_page(kv, t / P, kv_head)[(t % P) * D + d];
    out[d] = static_cast<float>(acc / sum);
  }
}

}  // namespace kvtier::kernels
