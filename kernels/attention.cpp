#include "kernels/attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/matmul_simd.h"
#include "kernels/vec_math.h"

namespace kvtier::kernels {
namespace {

using simd::Vec;

const float* key_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.k_offset + static_cast<long>(kv_head) * kv.head_dim * kv.page_size;
}

const float* value_page(const PagedKv& kv, int block, int kv_head) {
  return kv.blocks[block] + kv.v_offset + static_cast<long>(kv_head) * kv.page_size * kv.head_dim;
}

// Register-blocked forms of the two inner loops, over simd::Vec. They do the
// same fused multiply-adds in the same order as the generic loops below; only
// which values stay in registers changes, so every path gives the same bits.
// Scores take whole pages of kFastPage keys (the engine's page size); values
// take kValueVecs vectors of a head's dimensions at a time.
//
// `ahead`, when not null, is the same head's K (or V) in the next page the
// call's caller will read, and the kernel prefetches it a line per step of
// its loop, so that it arrives while this page is worked on: a sequence's
// pages lie scattered over the pool, and no hardware prefetcher sees the
// next one coming. The prefetches ride in the compute loop because GCC 12
// deletes a loop that does nothing but prefetch. (A cached tail's
// attention, 16 rows over 1008 keys from memory, old and new code
// alternating in one process: 0.88-1.05 -> 0.72-0.79 ms a layer on 2
// threads; from cache, no change.)
constexpr bool kBlocked = simd::kLanes > 1;
constexpr int kRegisters = simd::kLanes == 16 ? 32 : 16;
constexpr int kFastPage = 16;
constexpr int kPageVecs = kFastPage / simd::kLanes;
constexpr int kScoreRows = std::clamp((kRegisters - 4) / kPageVecs, 1, 8);
constexpr int kValueVecs = kRegisters == 32 ? 4 : 2;
constexpr int kValueRows = 6;
// Queries taken in one pass; their softmax sums advance side by side.
constexpr int kSumRows = 16;

// Calls fn(std::integral_constant<int, R>{}) with R = min(n, Max), n >= 1:
// the register-blocked kernels take their number of queries at compile time.
template <int Max, typename Fn>
void with_rows(int n, Fn&& fn) {
  if constexpr (Max > 1)
    if (n < Max) return with_rows<Max - 1>(n, std::forward<Fn>(fn));
  fn(std::integral_constant<int, Max>{});
}

// s[r][j] = fma chain over d of q[r][d] * kp[d][j], from 0, for a whole page.
template <int R>
void page_scores_blocked(float* const* s, const float* const* q, const float* kp, int D,
                         const float* ahead) {
  Vec acc[R][kPageVecs];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kPageVecs; ++i) acc[r][i] = simd::zero();
  for (int d = 0; d < D; ++d) {
    Vec k[kPageVecs];
    for (int i = 0; i < kPageVecs; ++i) k[i] = simd::load(kp + d * kFastPage + i * simd::kLanes);
    if (ahead != nullptr) simd::prefetch(ahead + d * kFastPage);  // a page row is one line
    for (int r = 0; r < R; ++r) {
      const Vec qd = simd::broadcast(q[r][d]);
      for (int i = 0; i < kPageVecs; ++i) acc[r][i] = simd::fma(qd, k[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < kPageVecs; ++i) simd::store(s[r] + i * simd::kLanes, acc[r][i]);
}

// Scores of n queries at slots [j0, j1) of one page: s[r][j] for slot j.
// On the blocked path the first row group prefetches `ahead` (may be null);
// the generic path (a partial page, or no vectors) leaves it.
void page_scores(float* const* s, const float* const* q, int n, const float* kp, int P, int D,
                 int j0, int j1, const float* ahead) {
  if (kBlocked && P == kFastPage && j0 == 0 && j1 == P) {
    for (int r = 0; r < n;) {
      with_rows<kScoreRows>(n - r, [&](auto rows) {
        page_scores_blocked<decltype(rows)::value>(s + r, q + r, kp, D, r == 0 ? ahead : nullptr);
        r += decltype(rows)::value;
      });
    }
    return;
  }
  for (int r = 0; r < n; ++r)
    for (int j = j0; j < j1; ++j) s[r][j] = 0.0f;
  for (int d = 0; d < D; ++d) {
    const float* kd = kp + d * P;
    for (int r = 0; r < n; ++r) {
      const float qd = q[r][d];
      for (int j = j0; j < j1; ++j) s[r][j] = __builtin_fmaf(qd, kd[j], s[r][j]);
    }
  }
}

// out[r][d] = fma(p[r][t], V[t][d], out[r][d]) for t in [a, b), in order, for
// every d; [a, b) lies in one page whose first key is `first` (vp its values).
template <int R>
void page_values_blocked(float* const* out, const float* const* p, const float* vp, int first,
                         int a, int b, int D, const float* ahead) {
  constexpr int kWidth = kValueVecs * simd::kLanes;
  // Step i of the loops prefetches floats [i * kWidth, (i + 1) * kWidth) of
  // `ahead`: over a whole page, all of it.
  for (int d0 = 0, step = 0; d0 < D; d0 += kWidth) {
    Vec o[R][kValueVecs];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < kValueVecs; ++i) o[r][i] = simd::load(out[r] + d0 + i * simd::kLanes);
    for (int t = a; t < b; ++t) {
      const float* v = vp + static_cast<long>(t - first) * D + d0;
      Vec vv[kValueVecs];
      for (int i = 0; i < kValueVecs; ++i) vv[i] = simd::load(v + i * simd::kLanes);
      if (ahead != nullptr)
        for (int f = 0; f < kWidth; f += 16) simd::prefetch(ahead + step * kWidth + f);
      ++step;
      for (int r = 0; r < R; ++r) {
        const Vec pt = simd::broadcast(p[r][t]);
        for (int i = 0; i < kValueVecs; ++i) o[r][i] = simd::fma(pt, vv[i], o[r][i]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < kValueVecs; ++i) simd::store(out[r] + d0 + i * simd::kLanes, o[r][i]);
  }
}

// The same for n queries, any D. On the blocked path the first row group
// prefetches `ahead` (may be null); the generic path leaves it.
void page_values(float* const* out, const float* const* p, int n, const float* vp, int first, int a,
                 int b, int D, const float* ahead) {
  if (kBlocked && D % (kValueVecs * simd::kLanes) == 0) {
    for (int r = 0; r < n;) {
      with_rows<kValueRows>(n - r, [&](auto rows) {
        page_values_blocked<decltype(rows)::value>(out + r, p + r, vp, first, a, b, D,
                                                   r == 0 ? ahead : nullptr);
        r += decltype(rows)::value;
      });
    }
    return;
  }
  for (int r = 0; r < n; ++r)
    for (int t = a; t < b; ++t) {
      const float* v = vp + static_cast<long>(t - first) * D;
      const float pt = p[r][t];
      for (int d = 0; d < D; ++d) out[r][d] = __builtin_fmaf(pt, v[d], out[r][d]);
    }
}

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

// Calls fn(block, a, b) for each present page's part [a, b) of [t_begin, t_end).
template <typename Fn>
void for_each_present_page(const PagedKv& kv, int t_begin, int t_end, Fn&& fn) {
  const int P = kv.page_size;
  for_each_present_run(kv, t_begin, t_end, [&](int a, int b) {
    for (int t = a; t < b;) {
      const int block = t / P, end = std::min((block + 1) * P, b);
      fn(block, t, end);
      t = end;
    }
  });
}

// The block after `block` when it is present and holds keys before t_end
// (the next page a loop over [.., t_end) reads), else -1.
int next_present_block(const PagedKv& kv, int block, int t_end) {
  const int next = block + 1;
  return next * kv.page_size < t_end && kv.blocks[next] != nullptr ? next : -1;
}

// Scores of queries [0, n) for keys [a, b) through kv's table, the queries'
// score rows being s[r] (indexed by key position). REQUIRES: n <= kSumRows.
void scores_range(float* const* s, const float* const* q, int n, const PagedKv& kv, int kv_head,
                  int a, int b) {
  const int P = kv.page_size;
  for_each_present_page(kv, a, b, [&](int block, int ta, int tb) {
    float* rows[kSumRows];  // the rows from the page's first key
    for (int r = 0; r < n; ++r) rows[r] = s[r] + block * P;
    const int next = next_present_block(kv, block, b);
    page_scores(rows, q, n, key_page(kv, block, kv_head), P, kv.head_dim, ta - block * P,
                tb - block * P, next < 0 ? nullptr : key_page(kv, next, kv_head));
  });
}

// out[r] += p[r][t] * V[t] for keys [a, b) through kv's table, in order.
void values_range(float* const* out, const float* const* p, int n, const PagedKv& kv, int kv_head,
                  int a, int b) {
  const int P = kv.page_size;
  for_each_present_page(kv, a, b, [&](int block, int ta, int tb) {
    const int next = next_present_block(kv, block, b);
    page_values(out, p, n, value_page(kv, block, kv_head), block * P, ta, tb, kv.head_dim,
                next < 0 ? nullptr : value_page(kv, next, kv_head));
  });
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

// sum[r] += s[r][t] for rows [0, n) and t in [a, b), each row's adds in
// increasing t (one chain, its bits). kLanes rows go together: a kLanes x
// kLanes block of scores is transposed so that one vector add advances every
// row's chain by one key. (Left to itself the compiler gathers across the
// rows, which is slower than scalar on AMD.)
void add_row_sums(float* sum, float* const* s, int n, int a, int b) {
  constexpr int L = simd::kLanes;
  for (int r0 = 0; r0 < n; r0 += L) {
    const int rows = std::min(L, n - r0);
    float lanes[L] = {};
    for (int i = 0; i < rows; ++i) lanes[i] = sum[r0 + i];
    Vec acc = simd::load(lanes);
    int t = a;
    for (; t + L <= b; t += L) {
      Vec v[L];
      for (int i = 0; i < L; ++i) v[i] = i < rows ? simd::load(s[r0 + i] + t) : simd::zero();
      simd::transpose(v);
      for (int j = 0; j < L; ++j) acc = simd::add(acc, v[j]);
    }
    simd::store(lanes, acc);
    for (int i = 0; i < rows; ++i) {
      sum[r0 + i] = lanes[i];
      for (int tt = t; tt < b; ++tt) sum[r0 + i] += s[r0 + i][tt];
    }
  }
}

// Turns a query's scores s[oldest .. keys) into exp(s * scale - max) over
// its present keys (skipping absent ones), max being the largest s * scale,
// and its scores before `oldest` into 0: weights that add nothing, so every
// later sum over [0, keys) has the bits of one over [oldest, keys).
void softmax_weights(float* s, int oldest, int keys, const PagedKv& kv, float scale) {
  for_each_present_run(kv, 0, oldest, [&](int a, int b) { std::fill(s + a, s + b, 0.0f); });
  auto each_run = [&](auto&& fn) { for_each_present_run(kv, oldest, keys, fn); };
  // The query's own page is present, so the first run starts the max.
  bool first = true;
  float max = 0.0f;
  each_run([&](int a, int b) {
    max = run_max(s, a, b, first ? s[a] : max);
    first = false;
  });
  // Rounding is monotonic, so the largest scaled score is the scaled
  // largest: the same max, and the same exp(s * scale - max), as scaling
  // every score first and taking the max of those, one pass fewer.
  const float scaled_max = max * scale;
  each_run([&](int a, int b) {
    for (int t = a; t < b; ++t) s[t] = vexp(s[t] * scale - scaled_max);
  });
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

void attention_queries(const AttentionQuery* queries, int n, int shared_keys, int kv_head,
                       float* scratch) {
  if (n <= 0) return;
  const PagedKv& shared = queries[0].kv;  // its table, for the shared keys
  const int D = shared.head_dim;
  auto keys = [&](int i) { return queries[i].pos + 1; };
  int width = shared_keys;  // score slots a query needs
  for (int i = 0; i < n; ++i) width = std::max(width, keys(i));
  // Query i's scores at scratch + i (width + 1), by key position; slot
  // `width` keeps 1 / sum of its softmax.
  auto scores = [&](int i) { return scratch + static_cast<long>(i) * (width + 1); };
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // Pointer views of the queries, kSumRows at a time, for the kernels.
  float* s[kSumRows];
  const float* q[kSumRows];
  float* out[kSumRows];

  for (int i0 = 0; i0 < n; i0 += kSumRows) {
    const int group = std::min(kSumRows, n - i0);
    int common = shared_keys;  // keys every query of the group sees through the shared table
    int oldest = INT_MAX;      // the oldest key any query of the group sees
    for (int r = 0; r < group; ++r) {
      const AttentionQuery& query = queries[i0 + r];
      s[r] = scores(i0 + r);
      q[r] = query.q;
      out[r] = query.out;
      common = std::min(common, keys(i0 + r));
      oldest = std::min(oldest, query.first);
    }
    // Keys before a query's window weigh exactly 0 (softmax_weights), and
    // a sum or an output chain that starts with zeros has the bits of one
    // that starts after them: nothing before `oldest` is read at all, and a
    // query's own keys start at its own window.
    auto own_first = [&](int r, int from) { return std::max(from, queries[i0 + r].first); };

    // Scores: the shared keys once for the group (keys past a query's own
    // position are computed and never used; absent pages are neither
    // computed nor read later), then each query's own keys.
    scores_range(s, q, group, shared, kv_head, std::min(oldest, shared_keys), shared_keys);
    for (int r = 0; r < group; ++r)
      scores_range(s + r, q + r, 1, queries[i0 + r].kv, kv_head, own_first(r, shared_keys),
                   keys(i0 + r));

    for (int r = 0; r < group; ++r)
      softmax_weights(s[r], queries[i0 + r].first, keys(i0 + r), queries[i0 + r].kv, scale);

    // Each query's sum of its weights, in increasing position. The chains
    // are independent, so over the keys all see they advance side by side
    // (one long chain per query would wait on each add).
    float sum[kSumRows];
    for (int r = 0; r < group; ++r) sum[r] = 0.0f;
    for_each_present_run(shared, std::min(oldest, common), common,
                         [&](int a, int b) { add_row_sums(sum, s, group, a, b); });
    for (int r = 0; r < group; ++r)
      for_each_present_run(queries[i0 + r].kv, own_first(r, common), keys(i0 + r),
                           [&](int a, int b) {
                             for (int t = a; t < b; ++t) sum[r] += s[r][t];
                           });
    for (int r = 0; r < group; ++r) s[r][width] = 1.0f / sum[r];

    // Weighted sum of values in increasing position: the keys all see, each
    // value loaded once for the group, then each query's own.
    for (int r = 0; r < group; ++r) std::fill(out[r], out[r] + D, 0.0f);
    values_range(out, s, group, shared, kv_head, std::min(oldest, common), common);
    for (int r = 0; r < group; ++r)
      values_range(out + r, s + r, 1, queries[i0 + r].kv, kv_head, own_first(r, common),
                   keys(i0 + r));
    for (int r = 0; r < group; ++r)
      for (int d = 0; d < D; ++d) out[r][d] *= s[r][width];

    // Probabilities into the caller's scores, in fixed point (see
    // AttentionScore): p_t = s[t] / sum, rounded down.
    for (int r = 0; r < group; ++r) {
      AttentionScore* key_scores = queries[i0 + r].key_scores;
      if (key_scores == nullptr) continue;
      const float inv = s[r][width];
      for_each_present_run(queries[i0 + r].kv, 0, keys(i0 + r), [&](int a, int b) {
        for (int t = a; t < b; ++t)
          key_scores[t] +=
              static_cast<AttentionScore>(s[r][t] * inv * static_cast<float>(kScoreOne));
      });
    }
  }
}

void attention_rows(float* out, long out_stride, const float* q, long q_stride, int n_rows,
                    int first_pos, const PagedKv& kv, int kv_head, float* scratch,
                    AttentionScore* key_scores) {
  AttentionQuery queries[kSumRows];
  for (int r0 = 0; r0 < n_rows; r0 += kSumRows) {
    const int k = std::min(kSumRows, n_rows - r0);
    for (int r = 0; r < k; ++r)
      queries[r] = {q + (r0 + r) * q_stride, out + (r0 + r) * out_stride, first_pos + r0 + r, kv,
                    key_scores};
    attention_queries(queries, k, first_pos + r0 + k, kv_head, scratch);
  }
}

void attention_row_reference(float* out, const float* q, int pos, const PagedKv& kv, int kv_head,
                             double* probs, int first) {
  const int P = kv.page_size, D = kv.head_dim;
  auto present = [&](int t) { return t >= first && kv.blocks[t / P] != nullptr; };
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
