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

void attention_row(float* out, const float* q, int pos, const PagedKv& kv, int kv_head,
                   float* scores) {
  const int P = kv.page_size, D = kv.head_dim;
  const int n = pos + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // Scores, a page at a time: s[j] = fma chain over d of q[d] * K[d][j].
  for (int start = 0, block = 0; start < n; start += P, ++block) {
    const int len = n - start < P ? n - start : P;
    const float* kp = key_page(kv, block, kv_head);
    float* s = scores + start;
    for (int j = 0; j < len; ++j) s[j] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float qd = q[d];
      const float* kd = kp + d * P;
      for (int j = 0; j < len; ++j) s[j] = __builtin_fmaf(qd, kd[j], s[j]);
    }
    for (int j = 0; j < len; ++j) s[j] *= scale;
  }

  float max = scores[0];
  for (int t = 1; t < n; ++t) max = scores[t] > max ? scores[t] : max;
  for (int t = 0; t < n; ++t) scores[t] = vexp(scores[t] - max);
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) sum += scores[t];

  // Weighted sum of values, position by position.
  for (int d = 0; d < D; ++d) out[d] = 0.0f;
  for (int start = 0, block = 0; start < n; start += P, ++block) {
    const int len = n - start < P ? n - start : P;
    const float* vp = value_page(kv, block, kv_head);
    for (int j = 0; j < len; ++j) {
      const float p = scores[start + j];
      const float* v = vp + j * D;
      for (int d = 0; d < D; ++d) out[d] = __builtin_fmaf(p, v[d], out[d]);
    }
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < D; ++d) out[d] *= inv;
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
