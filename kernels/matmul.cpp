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
//  * Packing (the weight once into PackedWeight's strips, A panels per call)
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
// AVX-512: 12 x 32 = 24 zmm accumulators, 2 for the weight row and 1 for the
// broadcast input: 24 FMAs (12 cycles on 2 FMA ports) per 14 loads per k.
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

// Cache blocking of the prefill path (see run_prefill), in floats, and how
// many k rows ahead the microkernel prefetches B. AVX-512: sized for 48 KiB
// L1d and 2 MiB L2 per core. AVX2: measured on a Zen 3 EPYC VM (32 KiB L1d,
// 1 MiB L2): the A panel (kKc x 6, 18 KiB) in L1, GPT-2's K = 768 in one
// block, and 384 columns (a thread's share of every GPT-2 124M width on 2
// threads is a multiple of it), prefetched 2 KiB ahead. In one process on
// the same inputs, with aligned loops, duplicate copies and alternating
// order (medians of 16 calls, weights cold), 768 x 256 led the old
// 384 x 768 / 16 by 0-9% on the four linear shapes at M = 1024, and
// 768 x 384 by a few percent more. Blocking never splits a chain, so it
// cannot change a bit.
#if defined(__AVX512F__)
constexpr int kKc = 384;
constexpr int kNc = 768;
constexpr int kPrefetchK = 16;
#else
constexpr int kKc = 768;
constexpr int kNc = 384;
constexpr int kPrefetchK = 32;
#endif
static_assert(kNc % kStrip == 0);

// Decode-sized M (at most this many rows) reads A in place.
constexpr int kSmallM = 16;
// Decode: k rows of a strip per pass over the row groups (a chunk, 48 KiB
// with AVX2: the first group reads it from memory, the others from L2), and
// how far ahead the groups prefetch the weight stream (see run_decode).
constexpr int kDecodeKc = 768;
// Below this many multiply-adds, one thread. A parallel region costs a few
// microseconds; 2^18 multiply-adds at M = 1 read 1 MiB of weight (~80 us from
// DRAM on one core), and decode gains from the second core's bandwidth.
constexpr double kParallelWork = 1 << 18;

struct Problem {
  float* out;
  const float* inp;
  const float* w;  // packed: strip s at w + s * K * kStrip
  const float* bias;
  int M, K, N;

  const float* strip(int n0, int k0) const {
    return w + (std::ptrdiff_t{n0 / kStrip} * K + k0) * kStrip;
  }
};

// out[0..R)[0..ncols) (row stride ldc) continues its fma chains over kc k's:
//   acc[i][j] = first ? 0 : c[i][j];  acc[i][j] = fma(a(i, k), b(k, j), acc) for k in [0, kc)
//   c[i][j] = bias ? acc + bias[j] : acc
// b is a packed strip: b(k, j) = b[k*kStrip + j].
// In place, a(i, k) = a[i*lda + k]; packed (see pack_a), a(i, k) = a[k*kMr + i].
// Prefetch: packed (prefill), b's rows kPrefetchK ahead; in place (decode),
// the `ahead` bytes run_decode hands this call, spread evenly over its k's
// (ahead_step: bytes per k, in 16.16 fixed point).
// R <= kMr rows and V <= kNv vectors are compile-time so the accumulators
// live in registers; columns at or beyond ncols are masked (never read from
// b/c/bias, never written).
template <bool PackedA, int R, int V>
void microkernel(const float* a, std::ptrdiff_t lda, const float* b, float* c, std::ptrdiff_t ldc,
                 int kc, int ncols, const float* bias, bool first, const char* ahead,
                 std::size_t ahead_step) {
  // A tile of whole vectors (every strip but the last of an N that is not a
  // multiple of kStrip) uses plain loads and stores: AVX2's masked store
  // (vmaskmovps) is microcoded on AMD cores, and a call stores R x V of them.
  const bool whole = ncols >= V * kLanes;
  Mask mask[V];
  for (int v = 0; v < V; ++v) mask[v] = simd::mask_first(ncols - v * kLanes);
  auto load_c = [&](const float* p, int v) {
    return whole ? simd::load(p) : simd::load(p, mask[v]);
  };
  Vec acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[i][v] = first ? simd::zero() : load_c(c + i * ldc + v * kLanes, v);
    }
  }
  for (int k = 0; k < kc; ++k) {
    Vec bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = simd::load(b + k * kStrip + v * kLanes);
    if constexpr (PackedA) {
      // One prefetch per 64-byte line of the row kPrefetchK ahead.
#pragma GCC unroll 4
      for (int f = 0; f < V * kLanes; f += 16) simd::prefetch(b + (k + kPrefetchK) * kStrip + f);
    } else {
      simd::prefetch(ahead + ((std::size_t(k) * ahead_step) >> 16));
    }
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const Vec ai = simd::broadcast(PackedA ? a[k * kMr + i] : a[i * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = simd::fma(ai, bv[v], acc[i][v]);
    }
  }
  if (bias) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const Vec bb = load_c(bias + v * kLanes, v);
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) acc[i][v] = simd::add(acc[i][v], bb);
    }
  }
  if (whole) {
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) simd::store(c + i * ldc + v * kLanes, acc[i][v]);
    }
    return;
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) simd::store(c + i * ldc + v * kLanes, acc[i][v], mask[v]);
  }
}

using MicrokernelFn = void (*)(const float*, std::ptrdiff_t, const float*, float*, std::ptrdiff_t,
                               int, int, const float*, bool, const char*, std::size_t);
using MicrokernelTable = std::array<std::array<MicrokernelFn, kNv>, kMr>;

// Table [r - 1][v - 1] of microkernel<PackedA, r, v>.
template <bool PackedA, std::size_t... Rs>
constexpr MicrokernelTable make_microkernel_table(std::index_sequence<Rs...>) {
  constexpr auto row = []<std::size_t R, std::size_t... Vs>(std::index_sequence<Vs...>) {
    return std::array<MicrokernelFn, kNv>{{&microkernel<PackedA, int{R}, int{Vs} + 1>...}};
  };
  return {{row.template operator()<Rs + 1>(std::make_index_sequence<kNv>{})...}};
}
constexpr MicrokernelTable kMicrokernels[2] = {
    make_microkernel_table<false>(std::make_index_sequence<kMr>{}),
    make_microkernel_table<true>(std::make_index_sequence<kMr>{})};

// One microkernel call: rows [m, m + r) (r <= kMr) of the output strip at
// columns [n0, n0 + kStrip) (clipped to N), reduction block [k0, k0 + kc).
// In place, a = &inp[m][k0]; packed, a is the packed panel. ahead and
// ahead_step: the in-place microkernel's prefetch (see microkernel).
void run_tile(const Problem& p, bool packed_a, const float* a, int m, int r, int n0, int k0, int kc,
              const char* ahead = nullptr, std::size_t ahead_step = 0) {
  const int ncols = std::min(kStrip, p.N - n0);
  const int nv = (ncols + kLanes - 1) / kLanes;
  const float* bias = (p.bias && k0 + kc == p.K) ? p.bias + n0 : nullptr;
  kMicrokernels[packed_a][r - 1][nv - 1](a, p.K, p.strip(n0, k0),
                                         p.out + std::ptrdiff_t{m} * p.N + n0, p.N, kc, ncols, bias,
                                         k0 == 0, ahead, ahead_step);
}

// Copies inp[m..m+r)[k0..k0+kc) (r <= kMr) into buf as (kc, kMr) row-major,
// so the microkernel reads A contiguously (rows of inp are K apart and, for K
// a multiple of 1024, would all fall in the same L1 set).
void pack_a(float* buf, const Problem& p, int m, int r, int k0, int kc) {
  const float* src = p.inp + std::ptrdiff_t{m} * p.K + k0;
#if defined(__AVX512F__)
  // 16 k at a time: load r (<= 12) rows of 16, transpose, store 16 rows of kMr.
  static_assert(kMr <= 16);
  for (int k = 0; k < kc; k += 16) {
    const int ks = std::min(16, kc - k);
    const Mask kmask = simd::mask_first(ks);
    Vec t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) t[i] = i < r ? simd::load(src + i * p.K + k, kmask) : simd::zero();
    simd::transpose(t);
#pragma GCC unroll 16
    for (int i = 0; i < ks; ++i) simd::store(buf + (k + i) * kMr, t[i], simd::mask_first(kMr));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // 8 k at a time: load r (<= 6) rows of 8, transpose, store each k's kMr
  // floats as one 8-float store. Its last 2 lanes land on the next k's first
  // 2, which that k's store then writes (a_buffer leaves kLanes of slack):
  // AVX2's masked store is microcoded on AMD.
  static_assert(kMr <= 8);
  int k = 0;
  for (; k + 8 <= kc; k += 8) {
    Vec t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) t[i] = i < r ? simd::load(src + i * p.K + k) : simd::zero();
    simd::transpose(t);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) simd::store(buf + (k + i) * kMr, t[i]);
  }
  for (int i = 0; i < r; ++i)
    for (int kk = k; kk < kc; ++kk) buf[kk * kMr + i] = src[std::ptrdiff_t{i} * p.K + kk];
#else
  for (int i = 0; i < r; ++i) {
    for (int k = 0; k < kc; ++k) buf[k * kMr + i] = src[std::ptrdiff_t{i} * p.K + k];
  }
#endif
}

// Writes strip s of w (columns [s*kStrip, s*kStrip + kStrip), all K rows)
// into dst as (K, kStrip) row-major; columns at or beyond N become 0.
void pack_strip(float* dst, const float* w, int K, int N, WeightLayout layout, int s) {
  const int c0 = s * kStrip;
  const int ncols = std::min(kStrip, N - c0);
  if (layout == WeightLayout::kInOut) {
    for (int k = 0; k < K; ++k) {
      const float* src = w + std::ptrdiff_t{k} * N + c0;
      float* d = dst + std::ptrdiff_t{k} * kStrip;
      for (int v = 0; v < kNv; ++v) {
        simd::store(d + v * kLanes,
                    simd::load(src + v * kLanes, simd::mask_first(ncols - v * kLanes)),
                    simd::mask_first(kStrip));
      }
    }
    return;
  }
#if defined(__AVX512F__)
  // kOutIn: the strip's columns are rows of W, contiguous along k. Load a
  // 16 (columns) x 16 (k) tile, transpose it in registers, store 16 k rows.
  for (int j = 0; j < kStrip; j += 16) {
    const int cols = ncols - j;  // valid columns in this tile (may be <= 0)
    for (int k = 0; k < K; k += 16) {
      const int ks = std::min(16, K - k);
      const Mask kmask = simd::mask_first(ks);
      Vec r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        r[i] = i < cols ? simd::load(w + std::ptrdiff_t{c0 + j + i} * K + k, kmask) : simd::zero();
      }
      simd::transpose(r);
#pragma GCC unroll 16
      for (int i = 0; i < ks; ++i) {
        simd::store(dst + std::ptrdiff_t{k + i} * kStrip + j, r[i], Mask(0xFFFF));
      }
    }
  }
#else
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < kStrip; ++j) {
      dst[std::ptrdiff_t{k} * kStrip + j] = j < ncols ? w[std::ptrdiff_t{c0 + j} * K + k] : 0.0f;
    }
  }
#endif
}

// Per-thread packing buffer for A, grown on demand, reused across calls.
float* a_buffer(std::size_t floats) {
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

// Prefill (large M), columns [nb, ne). BLIS-style loops: jc (kNc columns),
// pc (kKc k's: the (kKc, kNc) B panel, a kKc-row slice of each of its
// strips, stays in L2), row panels of kMr rows (pack A's (kKc, kMr) panel
// into L1), strips. The A panel meets every strip of the B panel
// while it sits in L1; the strips stream from L2, prefetched; the panel is
// reused by all M rows.
void run_prefill(const Problem& p, int nb, int ne) {
  float* abuf = a_buffer(std::size_t{kKc} * kMr + kLanes);  // slack for pack_a's last store
  for (int jc = nb; jc < ne; jc += kNc) {
    const int nc = std::min(kNc, ne - jc);
    for (int pc = 0; pc < p.K; pc += kKc) {
      const int kc = std::min(kKc, p.K - pc);
      for (int m = 0; m < p.M; m += kMr) {
        const int r = std::min(kMr, p.M - m);
        pack_a(abuf, p, m, r, pc, kc);
        for (int n0 = jc; n0 < jc + nc; n0 += kStrip) run_tile(p, true, abuf, m, r, n0, pc, kc);
      }
    }
  }
}

// Decode (small M), columns [nb, ne): one strip at a time, front to back in
// chunks of kDecodeKc rows, all row groups over each chunk while it is in
// cache. The weight streams once, sequentially: a thread's strips are
// contiguous, so the next chunk of the stream is the memory right after
// this one. Every group prefetches its share of that next chunk, spread
// over its k's, so the stream flows the whole time. (Prefetching only a
// few rows ahead of the first group, as prefill does, leaves memory idle
// while the other groups run, then asks for the next chunk faster than
// memory gives it.) In one process, alternating, over GPT-2 124M's 48
// linear weights (340 MB, from memory) on 2 threads: M = 8 went from 15.6
// to 12.3 ms, M = 16 from 26.4 to 24 ms (its fastest calls 23 -> 16.5 ms),
// M = 1 and 4 no slower.
void run_decode(const Problem& p, int nb, int ne) {
  // Row groups of near-equal size (16 rows on AVX2: 5, 5, 6, not 6, 6, 4):
  // a group of few rows has too few accumulators to hide the fma latency.
  const int groups = (p.M + kMr - 1) / kMr;
  for (int n0 = nb; n0 < ne; n0 += kStrip) {
    for (int pc = 0; pc < p.K; pc += kDecodeKc) {
      const int kc = std::min(kDecodeKc, p.K - pc);
      const char* next =
          reinterpret_cast<const char*>(p.strip(n0, pc) + std::ptrdiff_t{kc} * kStrip);
      const std::size_t bytes = std::size_t(kc) * kStrip * sizeof(float);
      for (int g = 0, m = 0; g < groups; ++g) {
        const int r = (p.M - m) / (groups - g);
        const std::size_t from = bytes * g / groups, share = bytes * (g + 1) / groups - from;
        run_tile(p, false, p.inp + std::ptrdiff_t{m} * p.K + pc, m, r, n0, pc, kc, next + from,
                 (share << 16) / kc);
        m += r;
      }
    }
  }
}

int strips_of(int N) { return (N + kStrip - 1) / kStrip; }

}  // namespace

void PackedWeight::Free::operator()(float* p) const {
  ::operator delete[](p, std::align_val_t{64});
}

std::size_t PackedWeight::bytes() const {
  return std::size_t(strips_of(N_)) * K_ * kStrip * sizeof(float);
}

PackedWeight PackedWeight::pack(const float* weight, int K, int N, WeightLayout layout) {
  PackedWeight packed;
  packed.K_ = K;
  packed.N_ = N;
  packed.data_.reset(static_cast<float*>(::operator new[](packed.bytes(), std::align_val_t{64})));
  const int strips = strips_of(N);
  float* dst = packed.data_.get();
#pragma omp parallel for schedule(static)
  for (int s = 0; s < strips; ++s)
    pack_strip(dst + std::ptrdiff_t{s} * K * kStrip, weight, K, N, layout, s);
  return packed;
}

void matmul(float* out, const float* inp, const PackedWeight& w, const float* bias, int M) {
  const Problem p{out, inp, w.data_.get(), bias, M, w.K_, w.N_};
  const int strips = strips_of(p.N);
  auto run_columns = [&p](int nb, int ne) {
    if (p.M > kSmallM)
      run_prefill(p, nb, ne);
    else
      run_decode(p, nb, ne);
  };
  int threads = 1;
  if (double(M) * p.K * p.N >= kParallelWork) threads = std::min(omp_get_max_threads(), strips);
  if (threads <= 1) {
    run_columns(0, p.N);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    // Thread t owns whole strips [s0, s1): the split is by columns only, and
    // strip-aligned, so no two threads ever write the same output element.
    const int t = omp_get_thread_num();
    const int nt = omp_get_num_threads();
    const int s0 = int(std::int64_t{strips} * t / nt);
    const int s1 = int(std::int64_t{strips} * (t + 1) / nt);
    if (s0 < s1) run_columns(s0 * kStrip, std::min(p.N, s1 * kStrip));
  }
}

}  // namespace kvtier::kernels
