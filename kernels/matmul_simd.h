// Internal to the CPU kernels (matmul.cpp, attention.cpp): the few vector
// operations they use, for three instruction sets that compute the same bits.
//
// Every path does exactly the scalar operations of matmul_reference, one lane
// per output column: a lane-wise fused multiply-add is IEEE fma(a, b, c) on
// each lane (one rounding), exactly like std::fma, and a lane-wise add is the
// scalar add. Nothing here reduces across lanes, so the instruction set (and
// hence the vector width) cannot change a result.
//
//   AVX-512F:  Vec = 16 floats, Mask = __mmask16
//   AVX2+FMA:  Vec = 8 floats,  Mask = a lane mask in __m256i
//   otherwise: Vec = 1 float,   Mask = bool (std::fma)
//
// transpose(r) turns a kLanes x kLanes tile in registers (r[i] row i) into
// its transpose (r[i] column i): data movement only.
#pragma once

#include <cmath>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace kvtier::kernels::simd {

#if defined(__AVX512F__)

inline constexpr int kLanes = 16;
inline constexpr const char* kIsaName = "avx512";
using Vec = __m512;
using Mask = __mmask16;

// Lanes [0, n) on; n may be <= 0 (all off) or >= kLanes (all on).
inline Mask mask_first(int n) {
  return n >= kLanes ? Mask(0xFFFF) : n <= 0 ? Mask(0) : Mask((1u << n) - 1);
}
inline Vec zero() { return _mm512_setzero_ps(); }
// Masked-off lanes are neither read (no fault past the end) nor written.
inline Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Vec v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec broadcast(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
// A hint only: never faults, so it may point past the end of a buffer.
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// In-register transpose of a 16x16 tile: r[i] holds row i on entry and column
// i on exit. Pure data movement, so it cannot change a value.
// (The all-lanes maskz forms compile to the plain shuffles; they sidestep a
// GCC 12 false -Wuninitialized on _mm512_undefined_ps in the unmasked ones.)
[[gnu::always_inline]] inline void transpose(Vec r[16]) {
  constexpr __mmask16 kAll = 0xFFFF;
  constexpr __mmask8 kAll8 = 0xFF;
  Vec t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      __m512d lo = _mm512_castps_pd(t[i + j]);
      __m512d hi = _mm512_castps_pd(t[i + j + 2]);
      r[i + 2 * j] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(kAll8, lo, hi));
      r[i + 2 * j + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(kAll8, lo, hi));
    }
  }
#pragma GCC unroll 2
  for (int i = 0; i < 16; i += 8) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_maskz_shuffle_f32x4(kAll, r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_maskz_shuffle_f32x4(kAll, r[i + j], r[i + j + 4], 0xdd);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_maskz_shuffle_f32x4(kAll, t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_maskz_shuffle_f32x4(kAll, t[j], t[j + 8], 0xdd);
  }
}

#elif defined(__AVX2__) && defined(__FMA__)

inline constexpr int kLanes = 8;
inline constexpr const char* kIsaName = "avx2";
using Vec = __m256;
using Mask = __m256i;

inline Mask mask_first(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v, Mask m) { _mm256_maskstore_ps(p, m, v); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// In-register transpose of an 8x8 tile: r[i] holds row i on entry and column
// i on exit. Pure data movement, so it cannot change a value.
[[gnu::always_inline]] inline void transpose(Vec r[8]) {
  Vec t[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  Vec u[8];
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

#else

inline constexpr int kLanes = 1;
inline constexpr const char* kIsaName = "scalar";
using Vec = float;
using Mask = bool;

inline Mask mask_first(int n) { return n > 0; }
inline Vec zero() { return 0.0f; }
inline Vec load(const float* p, Mask m) { return m ? *p : 0.0f; }
inline Vec load(const float* p) { return *p; }
inline void store(float* p, Vec v, Mask m) {
  if (m) *p = v;
}
inline void store(float* p, Vec v) { *p = v; }
inline Vec broadcast(float x) { return x; }
inline Vec fma(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
inline Vec add(Vec a, Vec b) { return a + b; }
inline void prefetch(const void*) {}
// The 1x1 transpose: nothing to move.
inline void transpose(Vec*) {}

#endif

}  // namespace kvtier::kernels::simd
