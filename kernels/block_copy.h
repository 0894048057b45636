// Copying a whole KV block between tiers in host memory (L1 <-> L2 without a
// GPU; the CUDA build will use a copy engine instead).
//
// Why not plain memcpy: a block (1.1 MiB for GPT-2) is below glibc's
// threshold for non-temporal stores, so memcpy reads every destination line
// before overwriting it (read-for-ownership) and fills the caches with a block
// nobody will read soon: about half of the machine's copy bandwidth.
// copy_block streams the stores past the caches instead.
//
// The result is byte-for-byte what memcpy gives (copy_block_reference);
// tests compare the two. REQUIRES: dst and src 64-byte aligned, not
// overlapping; bytes a multiple of 64.
#pragma once

#include <cstddef>

namespace kvtier::kernels {

void copy_block(void* dst, const void* src, std::size_t bytes);

// The plain reference: memcpy.
void copy_block_reference(void* dst, const void* src, std::size_t bytes);

}  // namespace kvtier::kernels
