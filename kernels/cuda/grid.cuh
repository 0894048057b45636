// Launch shapes shared by the element-wise kernels in this folder.
#pragma once

#include <algorithm>

namespace kvtier::kernels::cuda_detail {

// Threads per block of the element-wise kernels.
inline constexpr int kElementThreads = 256;
// Enough thread blocks in flight to fill a large GPU (132 SMs x 2048
// threads / 256, times 2); longer arrays are covered by a grid-stride loop.
inline constexpr long kElementMaxBlocks = 2112;

// Thread blocks for n elements, one element per thread per grid stride.
// REQUIRES: n > 0.
inline unsigned element_blocks(long n) {
  return static_cast<unsigned>(
      std::min((n + kElementThreads - 1) / kElementThreads, kElementMaxBlocks));
}

}  // namespace kvtier::kernels::cuda_detail
