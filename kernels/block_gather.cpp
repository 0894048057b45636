#include "kernels/block_gather.h"

#include <cassert>

namespace kvtier::kernels {

void block_gather(void* staging, const void* const* blocks, int n_blocks, std::size_t block_bytes) {
  assert(block_bytes % sizeof(BlockWord) == 0);
  const std::size_t words = block_bytes / sizeof(BlockWord);
  for (int b = 0; b < n_blocks; ++b)
    for (std::size_t w = 0; w < words; ++w) block_gather_word(staging, blocks, words, b, w);
}

void block_scatter(void* const* blocks, const void* staging, int n_blocks,
                   std::size_t block_bytes) {
  assert(block_bytes % sizeof(BlockWord) == 0);
  const std::size_t words = block_bytes / sizeof(BlockWord);
  for (int b = 0; b < n_blocks; ++b)
    for (std::size_t w = 0; w < words; ++w) block_scatter_word(blocks, staging, words, b, w);
}

}  // namespace kvtier::kernels
