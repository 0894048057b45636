#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/vec_math.h"

namespace kvtier::kernels {
namespace {

// Rows whose softmax sums advance side by side (see attention_rows).
constexpr int kMaxTileRows = 16;

const float* key_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.k_offset + static_cast<long>(kv_head) * kv.head_dim * kv.page_size;
}

const float* value_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.v_offset + static_cast<long>(kv_head) * kv.page_size * kv.head_dim;
}

// Register-blocked forms of the two inner loops for the common shape (pages
// of 16 keys, heads of 64 dims) on AVX-512. They perform the same fused
// multiply-adds in the same order as the generic loops below — only which
// values stay in registers changes — so either path gives the same bits.
#if defined(__AVX512F__)
constexpr int kFastPage = 16;
constexpr int kFastDim = 64;

// s row r (16 scores) = fma chain over d of q_r[d] * kp[d][0..16), from 0.
template <int R>
void scores_page16(float* s, long s_stride, const float* q, long q_stride, const float* kp, int D) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int d = 0; d < D; ++d) {
    const __m512 k = _mm512_loadu_ps(kp + d * kFastPage);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * q_stride + d]), k, acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(s + r * s_stride, acc[r]);
}

// out rows r (64 values) += p_r[t] * V[t] for t in [t_begin, t_end), in order.
template <int R>
void values_head64(float* out, long out_stride, const float* const* probs, const PagedKv& kv,
                   int kv_head, int t_begin, int t_end) {
  __m512 o[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) o[r][i] = _mm512_loadu_ps(out + r * out_stride + 16 * i);
  const int P = kv.page_size;
  for (int t = t_begin; t < t_end;) {
    // [t_begin, t_end) is a run of present pages: take it a page at a time.
    const int block = t / P;
    const int page_end = std::min((block + 1) * P, t_end);
    const float* page = value_page(kv, block, kv_head);
    for (; t < page_end; ++t) {
      const float* v = page + (t - block * P) * kFastDim;
      __m512 vv[4];
      for (int i = 0; i < 4; ++i) vv[i] = _mm512_loadu_ps(v + 16 * i);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_set1_ps(probs[r][t]);
        for (int i = 0; i < 4; ++i) o[r][i] = _mm512_fmadd_ps(p, vv[i], o[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) _mm512_storeu_ps(out + r * out_stride + 16 * i, o[r][i]);
}
#endif

// Calls fn(begin, end) for each run of consecutive present positions in
// [t_begin, t_end), in increasing order. With every page present that is one
// call for the whole range, so loops written over runs do exactly what they
// did over the range.
template <typename Fn>
void for_each_present_run(const PagedKv& kv, int t_begin, int t_end, Fn&& fn) {
  const int P = kv.page_size;
  int block = t_begin / P;
  int t = t_begin;
  while (t < t_end) {
    while (t < t_end && kv.blocks[block] == nullptr) t = ++block * P;
    if (t >= t_end) return;
    int end = t;
    while (end < t_end && kv.blocks[block] != nullptr) end = std::min(++block * P, t_end);
    fn(t, end);
    t = end;
  }
}

// max(init, s[a..b)) as the scalar loop `max = s[t] > max ? s[t] : max` gives
// it, but over 16 independent lanes that the compiler vectorises (the scalar
// loop is one long dependency chain). Without NaNs the maximum of a set does
// not depend on the order it is taken in, so the bits are the scalar loop's;
// the one choice order makes, between -0 and +0, cannot change exp(s - max).
float run_max(const float* s, int a, int b, float init) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = init;
  int t = a;
  for (; t + kLanes <= b; t += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = s[t + j] > lane[j] ? s[t + j] : lane[j];
  float max = init;
  for (; t < b; ++t) max = s[t] > max ? s[t] : max;
  for (int j = 0; j < kLanes; ++j) max = lane[j] > max ? lane[j] : max;
  return max;
}

// out (D) += p[t] * V[t] for t in [t_begin, t_end), in order: the generic form.
void values_generic(float* out, const float* p, const PagedKv& kv, int kv_head, int t_begin,
                    int t_end) {
  const int D = kv.head_dim;
  for (int t = t_begin; t < t_end; ++t) {
    const float* v = value_page(kv, t / kv.page_size, kv_head) + (t % kv.page_size) * D;
    const float pt = p[t];
    for (int d = 0; d < D; ++d) out[d] = __builtin_fmaf(pt, v[d], out[d]);
  }
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
                    int first_pos, const PagedKv& kv, int kv_head, float* scratch,
                    AttentionScore* key_scores) {
  const int P = kv.page_size, D = kv.head_dim;
  const int n = first_pos + n_rows;  // keys the last row sees
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Row r's scores at scratch + r (n + 1); slot n keeps 1 / sum of its softmax.
  auto scores = [&](int r) { return scratch + static_cast<long>(r) * (n + 1); };

  // Scores, a page at a time: s[j] = fma chain over d of q[d] * K[d][j]. Keys
  // past a row's own position are computed and never used; absent pages are
  // neither computed nor read later.
  for (int start = 0, block = 0; start < n; start += P, ++block) {
    if (kv.blocks[block] == nullptr) continue;
    const int len = n - start < P ? n - start : P;
    const float* kp = key_page(kv, block, kv_head);
#if defined(__AVX512F__)
    if (P == kFastPage && len == kFastPage) {
      const long stride = n + 1;
      int r = 0;
      for (; r + 8 <= n_rows; r += 8)
        scores_page16<8>(scores(r) + start, stride, q + r * q_stride, q_stride, kp, D);
      for (; r < n_rows; ++r)
        scores_page16<1>(scores(r) + start, stride, q + r * q_stride, 0, kp, D);
      continue;
    }
#endif
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

  // Softmax of each row over its own present keys 0 .. first_pos + r. The
  // row's own page is present, so the first run starts the max.
  for (int r = 0; r < n_rows; ++r) {
    float* s = scores(r);
    const int keys = first_pos + r + 1;
    auto each_run = [&](auto&& fn) { for_each_present_run(kv, 0, keys, fn); };
    each_run([&](int a, int b) {
      for (int t = a; t < b; ++t) s[t] *= scale;
    });
    bool first = true;
    float max = 0.0f;
    each_run([&](int a, int b) {
      max = run_max(s, a, b, first ? s[a] : max);
      first = false;
    });
    each_run([&](int a, int b) {
      for (int t = a; t < b; ++t) s[t] = vexp(s[t] - max);
    });
    float* o = out + r * out_stride;
    for (int d = 0; d < D; ++d) o[d] = 0.0f;
  }
  // Each row's sum of its exponentials, in increasing position. The rows'
  // chains are independent, so over the keys they all see they advance side
  // by side (one long chain per row would wait on each add); the keys after
  // first_pos go row by row. Slot n of a row keeps 1 / sum.
  {
    float sum[kMaxTileRows];
    for (int r0 = 0; r0 < n_rows; r0 += kMaxTileRows) {
      const int rows = std::min(kMaxTileRows, n_rows - r0);
      for (int r = 0; r < rows; ++r) sum[r] = 0.0f;
      for_each_present_run(kv, 0, first_pos + r0 + 1, [&](int a, int b) {
        for (int t = a; t < b; ++t)
          for (int r = 0; r < rows; ++r) sum[r] += scores(r0 + r)[t];
      });
      for (int r = 1; r < rows; ++r)
        for_each_present_run(kv, first_pos + r0 + 1, first_pos + r0 + r + 1, [&](int a, int b) {
          for (int t = a; t < b; ++t) sum[r] += scores(r0 + r)[t];
        });
      for (int r = 0; r < rows; ++r) scores(r0 + r)[n] = 1.0f / sum[r];
    }
  }

  // Weighted sum of values, position by position. Rows go in groups of four:
  // keys up to the group's first position are seen by all four and each
  // value row is loaded once for them; the few keys after it are seen by
  // some rows only and go row by row. Each row still adds in key order.
  for (int r0 = 0; r0 < n_rows; r0 += 4) {
    const int rows = n_rows - r0 < 4 ? n_rows - r0 : 4;
    const int shared_end = first_pos + r0 + 1;  // keys [0, shared_end) are seen by every row
    float* o = out + r0 * out_stride;
#if defined(__AVX512F__)
    if (rows == 4 && D == kFastDim) {
      const float* probs[4] = {scores(r0), scores(r0 + 1), scores(r0 + 2), scores(r0 + 3)};
      for_each_present_run(kv, 0, shared_end, [&](int a, int b) {
        values_head64<4>(o, out_stride, probs, kv, kv_head, a, b);
      });
    } else
#endif
      for (int r = 0; r < rows; ++r)
        for_each_present_run(kv, 0, shared_end, [&](int a, int b) {
          values_generic(o + r * out_stride, scores(r0 + r), kv, kv_head, a, b);
        });
    for (int r = 1; r < rows; ++r)
      for_each_present_run(kv, shared_end, first_pos + r0 + r + 1, [&](int a, int b) {
        values_generic(o + r * out_stride, scores(r0 + r), kv, kv_head, a, b);
      });
  }
  for (int r = 0; r < n_rows; ++r) {
    const float inv = scores(r)[n];
    float* o = out + r * out_stride;
    for (int d = 0; d < D; ++d) o[d] *= inv;
  }

  // Probabilities into the caller's scores, in fixed point (see
  // AttentionScore): p_t = s[t] / sum, rounded down.
  if (key_scores == nullptr) return;
  for (int r = 0; r < n_rows; ++r) {
    const float* s = scores(r);
    const float inv = s[n];
    for_each_present_run(kv, 0, first_pos + r + 1, [&](int a, int b) {
      for (int t = a; t < b; ++t)
        key_scores[t] += static_cast<AttentionScore>(s[t] * inv * static_cast<float>(kScoreOne));
    });
  }
}

void attention_row_reference(float* out, const float* q, int pos, const PagedKv& kv, int kv_head,
                             double* probs) {
  const int P = kv.page_size, D = kv.head_dim;
  auto present = [&](int t) { return kv.blocks[t / P] != nullptr; };
  std::vector<double> s(pos + 1, 0.0);
  double max = -INFINITY;
  for (int t = 0; t <= pos; ++t) {
    if (!present(t)) continue;
    const float* kp = key_page(kv, t / P, kv_head);
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * kp[d * P + t % P];
    s[t] = dot / std::sqrt(static_cast<double>(D));
    max = s[t] > max ? s[t] : max;
  }
  double sum = 0.0;
  for (int t = 0; t <= pos; ++t)
    if (present(t)) sum += (s[t] = std::exp(s[t] - max));
  for (int d = 0; d < D; ++d) {
    double acc = 0.0;
    for (int t = 0; t <= pos; ++t)
      if (present(t)) acc += s[t] * value_page(kv, t / P, kv_head)[(t % P) * D + d];
    out[d] = static_cast<float>(acc / sum);
  }
  if (probs != nullptr)
    for (int t = 0; t <= pos; ++t) probs[t] = s[t] / sum;
}

}  // namespace kvtier::kernels
