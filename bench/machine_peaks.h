// What this machine can do, measured in the same run as the thing compared
// with it: memory bandwidth and a well-kept BLAS's fp32 GEMM speed. Figures
// are best-of-n wall-clock rates, so a noisy neighbour lowers them rather
// than flattering our ratios.
#pragma once

namespace kvtier::bench {

// Debian's OpenBLAS 0.3.21 does not recognise Sapphire/Emerald Rapids and
// falls back to its SSE3 "Prescott" kernels, about a quarter of its real
// speed. OpenBLAS picks kernels when it loads, so unless OPENBLAS_CORETYPE is
// set this re-executes the program with OPENBLAS_CORETYPE=SkylakeX on an
// AVX-512 machine (returning only if that is not needed or fails). Call it
// first thing in main().
void use_best_openblas_kernels(char** argv);

// The OpenBLAS kernel family in use, for the report.
const char* openblas_core();

// Bytes copied per second (each byte counted once) by memcpy of a buffer far
// larger than the caches, split across `threads` threads; best of `repeats`.
// This and read_bytes_per_second use memory laid out as the tiers' pools are
// (huge pages where the kernel has them), so small pages' costs are not in
// the reference.
double memcpy_bytes_per_second(int threads, int repeats = 5);

// Bytes read per second streaming a buffer far larger than the caches on
// `threads` threads: the ceiling for a decode step, which only reads weights.
double read_bytes_per_second(int threads, int repeats = 5);

// FLOP/s of OpenBLAS sgemm for out (M, N) = inp (M, K) * W, W stored (N, K)
// when `weight_out_in` (CblasTrans) or (K, N); best of `repeats`.
double openblas_sgemm_flops(int M, int K, int N, bool weight_out_in, int threads, int repeats = 5);

// Peak resident set size of this process so far, in bytes.
double peak_rss_bytes();

}  // namespace kvtier::bench
