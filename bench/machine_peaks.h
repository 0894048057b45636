// What this machine can do, measured in the same run as the thing compared
// with it: memory copy bandwidth and a well-kept BLAS's fp32 GEMM speed.
// Figures are best-of-n wall-clock rates, so a noisy neighbour lowers the
// peak rather than our ratio's denominator alone.
#pragma once

namespace kvtier::bench {

// Bytes copied per second (each byte counted once) by memcpy of a buffer far
// larger than the caches, split across `threads` threads; best of `repeats`.
double memcpy_bytes_per_second(int threads, int repeats = 5);

// FLOP/s of OpenBLAS sgemm for out (M, N) = inp (M, K) * W, W stored (N, K)
// when `weight_out_in` (CblasTrans) or (K, N); best of `repeats`.
double openblas_sgemm_flops(int M, int K, int N, bool weight_out_in, int threads, int repeats = 3);

// Peak resident set size of this process so far, in bytes.
double peak_rss_bytes();

}  // namespace kvtier::bench
