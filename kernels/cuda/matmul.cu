// The matmul kernel (see kernels/cuda/matmul_cuda.h for the contract): a
// shared-memory tiled SGEMM in which every thread owns a TM x TN patch of
// outputs and walks k in increasing order, one fmaf per output per k.
#include "kernels/cuda/matmul_cuda.h"

namespace kvtier::kernels {
namespace {

// Tile shapes: a thread block computes BM x BN outputs with
// (BM / TM) x (BN / TN) threads, staging BK values of k at a time.
// With K never split, a decode step has only N chains to run, each a long
// run of dependent fmas: what limits it is how many weight bytes are in
// flight. So small tiles spread the chains over many thread blocks, a deep
// BK stages many k at once, and LOADERS times as many threads as compute
// help stage each tile (only the first (BM / TM) x (BN / TN) compute).
// UNROLL is the staging loops' unrolling: loads in flight per thread.
template <int BM, int BN, int TM, int TN, int BK, int LOADERS, int UNROLL>
struct Tiles {
  static constexpr int kBM = BM, kBN = BN, kTM = TM, kTN = TN, kBK = BK, kUnroll = UNROLL;
  static constexpr int kComputeThreads = (BM / TM) * (BN / TN);
  static constexpr int kThreads = kComputeThreads * LOADERS;
};
using LargeTiles = Tiles<64, 64, 4, 4, 16, 1, 4>;   // 256 threads, for prefill
using SmallTiles = Tiles<16, 32, 4, 1, 128, 2, 8>;  // 256 threads, for batches of decode rows
using RowTiles = Tiles<4, 32, 4, 1, 256, 8, 8>;     // 256 threads, for a few rows (M <= 4)
// SmallTiles for up to kSmallTilesMaxRows rows when LargeTiles' grid would
// have fewer than kLargeTilesMinBlocks thread blocks (about two per SM of a
// large GPU): their four times as many blocks keep more weight loads in
// flight. Measured on an H100: M = 64, N = 768 goes from 120 to 22 us; the LM
// head (N = 50257) and prefill (M = 1024) stay faster with LargeTiles.
constexpr int kSmallTilesMaxRows = 64;
constexpr long kLargeTilesMinBlocks = 256;

// Thread (ty, tx) owns rows ty + i * (BM / TM) and columns tx + j * (BN / TN):
// strided, so a warp's shared-memory reads hit distinct banks.
template <typename T, WeightLayout kLayout>
__global__ void __launch_bounds__(T::kThreads)
    matmul_kernel(float* out, const float* inp, const float* w, const float* bias, int M, int K,
                  int N) {
  constexpr int BM = T::kBM, BN = T::kBN, BK = T::kBK, TM = T::kTM, TN = T::kTN;
  constexpr int RY = BM / TM, RX = BN / TN;
  __shared__ float a_tile[BK][BM + 1];
  __shared__ float w_tile[BK][BN + 1];
  const int tx = threadIdx.x % RX, ty = threadIdx.x / RX;
  const bool computes = threadIdx.x < T::kComputeThreads;
  const long m0 = static_cast<long>(blockIdx.y) * BM, n0 = static_cast<long>(blockIdx.x) * BN;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    // Stage inp[m0.., k0..] and the weight's [k0.., n0..], zero outside;
    // unrolled so that each thread has several loads in flight.
#pragma unroll(T::kUnroll)
    for (int e = threadIdx.x; e < BM * BK; e += T::kThreads) {
      const int mm = e / BK, kk = e % BK;
      const long m = m0 + mm, k = k0 + kk;
      a_tile[kk][mm] = (m < M && k < K) ? inp[m * K + k] : 0.0f;
    }
#pragma unroll(T::kUnroll)
    for (int e = threadIdx.x; e < BN * BK; e += T::kThreads) {
      int nn, kk;
      if constexpr (kLayout == WeightLayout::kOutIn) {
        nn = e / BK, kk = e % BK;  // (N, K): consecutive threads read along k
      } else {
        kk = e / BN, nn = e % BN;  // (K, N): consecutive threads read along n
      }
      const long n = n0 + nn, k = k0 + kk;
      float v = 0.0f;
      if (n < N && k < K) v = kLayout == WeightLayout::kOutIn ? w[n * K + k] : w[k * N + n];
      w_tile[kk][nn] = v;
    }
    __syncthreads();
    // Only real k: an fma with a padded zero could turn -0.0f into +0.0f.
    const int kn = computes ? min(BK, K - k0) : 0;
    for (int kk = 0; kk < kn; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = a_tile[kk][ty + i * RY];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = w_tile[kk][tx + j * RX];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the next stage overwrites the tiles
  }
  if (!computes) return;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const long m = m0 + ty + i * RY;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const long n = n0 + tx + j * RX;
      if (n < N) out[m * N + n] = bias ? acc[i][j] + bias[n] : acc[i][j];
    }
  }
}

template <typename T>
cudaError_t launch(float* out, const float* inp, const float* w, const float* bias, int M, int K,
                   int N, WeightLayout layout, cudaStream_t stream) {
  const dim3 grid((N + T::kBN - 1) / T::kBN, (M + T::kBM - 1) / T::kBM);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  if (layout == WeightLayout::kOutIn)
    matmul_kernel<T, WeightLayout::kOutIn>
        <<<grid, T::kThreads, 0, stream>>>(out, inp, w, bias, M, K, N);
  else
    matmul_kernel<T, WeightLayout::kInOut>
        <<<grid, T::kThreads, 0, stream>>>(out, inp, w, bias, M, K, N);
  return cudaGetLastError();
}

}  // namespace

cudaError_t matmul_cuda(float* out, const float* inp, const float* weight, const float* bias, int M,
                        int K, int N, WeightLayout layout, cudaStream_t stream) {
  if (M < 0 || K <= 0 || N <= 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  // The tile shape changes which thread computes an output, never its chain.
  if (M <= RowTiles::kBM) return launch<RowTiles>(out, inp, weight, bias, M, K, N, layout, stream);
  const long large_blocks = static_cast<long>((N + LargeTiles::kBN - 1) / LargeTiles::kBN) *
                            ((M + LargeTiles::kBM - 1) / LargeTiles::kBM);
  if (M <= kSmallTilesMaxRows && large_blocks < kLargeTilesMinBlocks)
    return launch<SmallTiles>(out, inp, weight, bias, M, K, N, layout, stream);
  return launch<LargeTiles>(out, inp, weight, bias, M, K, N, layout, stream);
}

}  // namespace kvtier::kernels
