// The CUDA tiers' memory: L1 in device memory (cudaMalloc) and L2 in
// page-locked host memory (cudaHostAlloc), each handed out as a Region that a
// BlockPool lays its blocks over (BlockPool(block_bytes, num_blocks, region)).
// The pool then frees the memory with the matching CUDA call when it goes.
//
// Nothing here aborts: a failure (no device, out of memory, no driver) comes
// back as the CUDA runtime's message, for the caller to report or to fall back
// to host pools. Whether a device is usable at all:
// kernels::cuda_device_missing() (kernels/cuda/cuda_device.h).
//
// Both are allocated on, and belong to, the calling thread's current device.
#pragma once

#include <cstddef>
#include <expected>
#include <string>

#include "tiers/block_pool.h"

namespace kvtier::tiers {

// `bytes` of device memory (cudaMalloc: aligned to at least 256 bytes). Its
// blocks are device pointers: copies and kernels may use them, the host may
// not dereference them. The region's copy is cuda_copy, so a pool over it
// copies blocks (BlockPool::copy) to and from host memory and within itself.
// Its link (DeviceLink) offers cuda_pinned_region for the tiers' host memory,
// a CudaCopyStream for their asynchronous copies, and a probe for a lost
// context. REQUIRES: bytes > 0.
std::expected<Region, std::string> cuda_device_region(std::size_t bytes);

// Copies `bytes` between any two of device memory, pinned and pageable host
// memory (cudaMemcpyDefault: unified addressing tells which), finished when it
// returns. Thread-safe: the L2 copy worker uses it beside the engine.
// A failed copy leaves dst's bytes unknown and cannot say so (Region::copy
// returns nothing): it reports itself with report_device_failure.
void cuda_copy(std::byte* dst, const std::byte* src, std::size_t bytes);

// For a failure that leaves bytes on or off the device unknown where the
// caller cannot say so (cuda_copy, the GPU's int8 codec behind a copy):
// every cuda_device_region's DeviceLink::failure reports it from now on (the
// first one reported), so that nothing copied off the device since is kept
// on L3. Thread-safe.
void report_device_failure(std::string why);

// `bytes` of page-locked host memory (cudaHostAlloc, portable to every
// device, page-aligned): the host reads and writes it, and copies to and from
// the device run asynchronously and at full bus speed, which pageable memory
// would not. REQUIRES: bytes > 0.
std::expected<Region, std::string> cuda_pinned_region(std::size_t bytes);

}  // namespace kvtier::tiers
