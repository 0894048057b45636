// Splitting an element-wise or row-wise kernel over the OpenMP threads.
//
// parallel_ranges(n, grain, parallel, fn) calls fn(begin, end) once for each
// grain-sized range of [0, n) (the last may be shorter), on the OpenMP threads
// when `parallel` is true and on the calling thread otherwise. Every index is
// in exactly one range, and a kernel that computes each element (or row) from
// its own inputs alone gives the same bits whichever thread runs the range.
// Callers pass parallel = false for work smaller than a parallel region's
// start-up (a few microseconds): decode-sized batches stay on one thread.
#pragma once

#include <algorithm>

namespace kvtier::kernels {

template <typename Fn>
void parallel_ranges(long n, long grain, bool parallel, Fn&& fn) {
  const long ranges = (n + grain - 1) / grain;
#pragma omp parallel for schedule(static) if (parallel)
  for (long r = 0; r < ranges; ++r) fn(r * grain, std::min(n, (r + 1) * grain));
}

// Element-wise kernels go parallel from this many elements (a (64, 1024)
// activation): below it a parallel region costs about what it saves.
inline constexpr long kParallelElements = 1L << 16;

// Their ranges: 16 KiB of floats, each a vectorised loop.
inline constexpr long kElementGrain = 4096;

}  // namespace kvtier::kernels
