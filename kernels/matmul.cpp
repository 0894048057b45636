// Matrix multiply: a scalar reference and a blocked, vectorised, threaded fast
// path that reproduces the reference bit for bit.
//
// Letters: M rows of inp/out, K the reduction (in-features), N out-features.
//
// Why the fast path is bit-identical to the reference
// ----------------------------------------------------
// The reference computes, for each (m, n): acc = 0; for k in [0, K):
// acc = fma(inp[m][k], w(k, n), acc); out = acc (+ bias[n]). The fast path
// performs exactly that sequence for every (m, n):
//  * Vectorisation is across n: a vector accumulator holds 16 (AVX-512), 8
//    (AVX2) or 1 consecutive output columns of one row, and each lane does its
//    own fma chain. No lane ever adds into another, so nothing is reassociated.
//  * Register blocking across m (several rows share each loaded weight vector)
//    changes only which values sit in registers, not the arithmetic.
//  * K is blocked, never split: a block of k's continues the chain from the
//    partial sum stored in `out` by the previous block. Storing and reloading a
//    float is exact, and blocks run in increasing k. The first block starts
//    from 0.0f; only the last one adds the bias.
//  * Threads split N (whole output columns), never K, so the thread count
//    decides only who computes a column, not how.
//  * Packing B (copying or transposing weight tiles into a contiguous buffer)
//    moves values without touching them.
// The build uses -ffp-contract=off, so the compiler never fuses or reorders on
// its own; every fma here is an explicit intrinsic or std::fma.
#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "kernels/matmul_simd.h"

namespace kvtier::kernels {

void matmul_reference(float* out, const float* inp, const float* weight, const float* bias, int M,
                      int K, int N, WeightLayout layout) {
  // w(k, n) is weight[n*K + k] for kOutIn and weight[k*N + n] for kInOut.
  const std::ptrdiff_t k_stride = layout == WeightLayout::kOutIn ? 1 : N;
  const std::ptrdiff_t n_stride = layout == WeightLayout::kOutIn ? K : 1;
  for (int m = 0; m < M; ++m) {
    const float* a = inp + std::ptrdiff_t{m} * K;
    for (int n = 0; n < N; ++n) {
      const float* w = weight + n * n_stride;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc = std::fma(a[k], w[k * k_stride], acc);
      out[std::ptrdiff_t{m} * N + n] = bias ? acc + bias[n] : acc;
    }
  }
}

namespace {

using simd::kLanes;
using simd::Mask;
using simd::Vec;

// Register tile of the microkernel: kMr rows x kNv vectors (kStrip columns).
// AVX-512: 12 x 32 = 24 zmm accumulators, 2 for the weight row, the input is
// an embedded broadcast operand of the fma.
#if defined(__AVX512F__)
constexpr int kMr = 12;
constexpr int kNv = 2;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kMr = 6;
constexpr int kNv = 2;
#else
constexpr int kMr = 4;
constexpr int kNv = 4;
#endif
constexpr int kStrip = kNv * kLanes;

// Cache blocking of the packed path (in floats). A packed B strip (kKc x
// kStrip, 32 KiB) stays in L1 while it meets every row block; the packed
// panel (kKc x kNc, 768 KiB) stays in L2 while the M loop runs over it.
constexpr int kKc = 256;
constexpr int kNc = 768;
constexpr int kMc = 8 * kMr;
static_assert(kNc % kStrip == 0);

// Decode-sized M (at most this many rows) streams the weight once.
constexpr int kSmallM = 16;
// kInOut at small M: k rows per pass over the output (see run_direct).
constexpr int kDirectKb = 16;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr double kParallelWork = 1 << 20;

struct Problem {
  float* out;
  const float* inp;
  const float* w;
  const float* bias;
  int M, K, N;
  WeightLayout layout;
};

// out[0..R)[0..ncols) (row stride ldc) continues its fma chains over kc k's:
//   acc[i][j] = first ? 0 : c[i][j];  acc[i][j] = fma(a[i][k], b[k][j], acc) for k in [0, kc)
//   c[i][j] = bias ? acc + bias[j] : acc
// a is (R, kc) with row stride lda, b is (kc, >= ncols) with row stride ldb.
// R <= kMr rows and V <= kNv vectors are compile-time so the accumulators
// live in registers; columns at or beyond ncols are masked (never read from
// b/c/bias, never written).
template <int R, int V>
void microkernel(const float* a, std::ptrdiff_t lda, const float* b, std::ptrdiff_t ldb, float* c,
                 std::ptrdiff_t ldc, int kc, int ncols, const float* bias, bool first) {
  Mask mask[V];
  for (int v = 0; v < V; ++v) mask[v] = simd::mask_first(ncols - v * kLanes);
  Vec acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[i][v] = first ? simd::zero() : simd::load(c + i * ldc + v * kLanes, mask[v]);
    }
  }
  for (int k = 0; k < kc; ++k) {
    Vec bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = simd::load(b + k * ldb + v * kLanes, mask[v]);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const Vec ai = simd::broadcast(a[i * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = simd::fma(ai, bv[v], acc[i][v]);
    }
  }
  if (bias) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const Vec bb = simd::load(bias + v * kLanes, mask[v]);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][v] = simd::add(acc[i][v], bb);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) simd::store(c + i * ldc + v * kLanes, acc[i][v], mask[v]);
  }
}

using MicrokernelFn = void (*)(const float*, std::ptrdiff_t, const float*, std::ptrdiff_t, float*,
                               std::ptrdiff_t, int, int, const float*, bool);

// kMicrokernels[r - 1][v - 1] handles r rows and v vectors.
template <std::size_t... Is>
constexpr auto make_microkernel_table(std::index_sequence<Is...>) {
  return std::array<std::array<MicrokernelFn, kNv>, kMr>{
      {[]<std::size_t R>(std::integral_constant<std::size_t, R>) {
        return []<std::size_t... Vs>(std::index_sequence<Vs...>) {
          return std::array<MicrokernelFn, kNv>{{&microkernel<int{R}, int{Vs} + 1>...}};
        }(std::make_index_sequence<kNv>{});
      }(std::integral_constant<std::size_t, Is + 1>{})...}};
}
constexpr auto kMicrokernels = make_microkernel_table(std::make_index_sequence<kMr>{});

// Runs rows [m0, m1) over one strip: columns [n0, n0 + kStrip) clipped to N,
// reduction block [k0, k0 + kc). b points at w(k0, n0) (or its packed copy)
// with row stride ldb.
void run_strip(const Problem& p, const float* b, std::ptrdiff_t ldb, int k0, int kc, int n0, int m0,
               int m1) {
  const int ncols = std::min(kStrip, p.N - n0);
  const int nv = (ncols + kLanes - 1) / kLanes;
  const bool first = k0 == 0;
  const float* bias = (p.bias && k0 + kc == p.K) ? p.bias + n0 : nullptr;
  for (int m = m0; m < m1; m += kMr) {
    const int r = std::min(kMr, m1 - m);
    kMicrokernels[r - 1][nv - 1](p.inp + std::ptrdiff_t{m} * p.K + k0, p.K, b, ldb,
                                 p.out + std::ptrdiff_t{m} * p.N + n0, p.N, kc, ncols, bias, first);
  }
}

// Copies w(k0..k0+kc, n0..n0+nc) into buf as consecutive strips of kStrip
// columns, each (kc, kStrip) row-major; columns at or beyond N become 0.
void pack_b(float* buf, const Problem& p, int k0, int kc, int n0, int nc) {
  const int strips = (nc + kStrip - 1) / kStrip;
  for (int s = 0; s < strips; ++s) {
    float* dst = buf + std::ptrdiff_t{s} * kc * kStrip;
    const int c0 = n0 + s * kStrip;
    const int ncols = std::min(kStrip, p.N - c0);
    if (p.layout == WeightLayout::kInOut) {
      for (int k = 0; k < kc; ++k) {
        const float* src = p.w + std::ptrdiff_t{k0 + k} * p.N + c0;
        float* d = dst + k * kStrip;
        for (int v = 0; v < kNv; ++v) {
          simd::store(d + v * kLanes, simd::load(src + v * kLanes, simd::mask_first(ncols - v * kLanes)),
                      simd::mask_first(kStrip));
        }
      }
      continue;
    }
#if defined(__AVX512F__)
    // kOutIn: the strip's columns are rows of W, contiguous along k. Load a
    // 16 (columns) x 16 (k) tile, transpose it in registers, store 16 k rows.
    for (int j = 0; j < kStrip; j += 16) {
      const int cols = ncols - j;  // valid columns in this tile (may be <= 0)
      for (int k = 0; k < kc; k += 16) {
        const int ks = std::min(16, kc - k);
        const Mask kmask = simd::mask_first(ks);
        Vec r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = i < cols ? simd::load(p.w + std::ptrdiff_t{c0 + j + i} * p.K + k0 + k, kmask)
                          : simd::zero();
        }
        simd::transpose16(r);
        for (int i = 0; i < ks; ++i) simd::store(dst + (k + i) * kStrip + j, r[i], Mask(0xFFFF));
      }
    }
#else
    for (int k = 0; k < kc; ++k) {
      for (int j = 0; j < kStrip; ++j) {
        dst[k * kStrip + j] = j < ncols ? p.w[std::ptrdiff_t{c0 + j} * p.K + k0 + k] : 0.0f;
      }
    }
#endif
  }
}

// Per-thread packing buffer, grown on demand and reused across calls.
float* pack_buffer(std::size_t floats) {
  struct Buffer {
    float* data = nullptr;
    std::size_t size = 0;
    ~Buffer() { ::operator delete[](data, std::align_val_t{64}); }
  };
  thread_local Buffer buf;
  if (buf.size < floats) {
    ::operator delete[](buf.data, std::align_val_t{64});
    buf.data = static_cast<float*>(::operator new[](floats * sizeof(float), std::align_val_t{64}));
    buf.size = floats;
  }
  return buf.data;
}

// Packed path for columns [nb, ne): BLIS-style loops jc (kNc columns), pc
// (kKc k's, pack the panel), ic (kMc rows), strip, row tile. The panel is
// reused by all M rows; each strip of it by kMc rows while it sits in L1.
void run_packed(const Problem& p, int nb, int ne, int nc, int kc) {
  float* buf = pack_buffer(std::size_t(kc) * nc);
  for (int jc = nb; jc < ne; jc += nc) {
    const int ncur = std::min(nc, ne - jc);
    for (int pc = 0; pc < p.K; pc += kc) {
      const int kcur = std::min(kc, p.K - pc);
      pack_b(buf, p, pc, kcur, jc, ncur);
      for (int ic = 0; ic < p.M; ic += kMc) {
        const int mend = std::min(p.M, ic + kMc);
        for (int n0 = jc, s = 0; n0 < jc + ncur; n0 += kStrip, ++s) {
          run_strip(p, buf + std::ptrdiff_t{s} * kcur * kStrip, kStrip, pc, kcur, n0, ic, mend);
        }
      }
    }
  }
}

// kInOut at small M, columns [nb, ne): no packing. Each pass takes kDirectKb
// rows of W and sweeps all columns, so the weight streams as a few long
// sequential runs while the partial sums (M x N floats) stay in cache.
void run_direct(const Problem& p, int nb, int ne) {
  for (int pc = 0; pc < p.K; pc += kDirectKb) {
    const int kcur = std::min(kDirectKb, p.K - pc);
    for (int n0 = nb; n0 < ne; n0 += kStrip) {
      run_strip(p, p.w + std::ptrdiff_t{pc} * p.N + n0, p.N, pc, kcur, n0, 0, p.M);
    }
  }
}

void run_columns(const Problem& p, int nb, int ne) {
  if (p.M <= kSmallM) {
    if (p.layout == WeightLayout::kInOut) {
      run_direct(p, nb, ne);
    } else {
      // One strip at a time: its transposed (kKc, kStrip) tile stays in L1.
      run_packed(p, nb, ne, kStrip, kKc);
    }
  } else {
    run_packed(p, nb, ne, kNc, kKc);
  }
}

}  // namespace

void matmul(float* out, const float* inp, const float* weight, const float* bias, int M, int K,
            int N, WeightLayout layout) {
  const Problem p{out, inp, weight, bias, M, K, N, layout};
  const int strips = (N + kStrip - 1) / kStrip;
  int threads = 1;
  if (double(M) * K * N >= kParallelWork) threads = std::min(omp_get_max_threads(), strips);
  if (threads <= 1) {
    run_columns(p, 0, N);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    // Thread t owns whole strips [s0, s1): the split is by columns only.
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int s0 = int(std::int64_t{strips} * t / nt);
    const int s1 = int(std::int64_t{strips} * (t + 1) / nt);
    if (s0 < s1) run_columns(p, s0 * kStrip, std::min(N, s1 * kStrip));
  }
}

}  // namespace kvtier::kernels
