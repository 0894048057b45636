// Gather and scatter of KV blocks between a block pool (an array of block
// base pointers, as a sequence's block table holds them) and one contiguous
// staging buffer: block i <-> staging bytes [i * block_bytes, (i+1) * block_bytes).
// The tiers use it to move a sequence's blocks in one transfer (one
// cudaMemcpyAsync or one io_uring write) instead of one per block.
//
// Blocks are opaque bytes here (tiers/ knows nothing of models). A null
// block pointer is a page that is not there (evicted): gather leaves its
// staging slot untouched, scatter writes nothing for it.
//
// The unit of work is one 16-byte word; block_gather_word / block_scatter_word
// are shared by the CPU reference (block_gather.cpp) and the CUDA kernels
// (cuda/block_gather.cu). REQUIRES: block_bytes a multiple of 16, every block
// and the staging buffer 16-byte aligned, no overlap between them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"

namespace kvtier::kernels {

struct alignas(16) BlockWord {
  std::uint32_t x, y, z, w;
};

// Word w of block b to its staging slot (gather), or back (scatter).
KVTIER_HD inline void block_gather_word(void* staging, const void* const* blocks,
                                        std::size_t words_per_block, std::size_t b, std::size_t w) {
  const auto* src = static_cast<const BlockWord*>(blocks[b]);
  if (src == nullptr) return;
  static_cast<BlockWord*>(staging)[b * words_per_block + w] = src[w];
}
KVTIER_HD inline void block_scatter_word(void* const* blocks, const void* staging,
                                         std::size_t words_per_block, std::size_t b,
                                         std::size_t w) {
  auto* dst = static_cast<BlockWord*>(blocks[b]);
  if (dst == nullptr) return;
  dst[w] = static_cast<const BlockWord*>(staging)[b * words_per_block + w];
}

// staging[i] = *blocks[i] for the n_blocks blocks (nulls skipped).
void block_gather(void* staging, const void* const* blocks, int n_blocks, std::size_t block_bytes);

// *blocks[i] = staging[i] for the n_blocks blocks (nulls skipped).
void block_scatter(void* const* blocks, const void* staging, int n_blocks, std::size_t block_bytes);

}  // namespace kvtier::kernels
