// How a block's bytes change on their way between tiers: the functions that
// move one block (or one layer of it) from L1 down into L2 or a store tier's
// staging buffer and back up, and the bytes a block takes in each tier.
// Worked out once, from the KV layout, where L1 lives, the tiers' formats and
// what each store needs of its buffers (engine/cache/store_tiers.h); KvCache
// runs these functions on the engine thread, the copy worker or the device's
// copy queue, and never asks again what a tier's format is.
//
//   exact tier   plain copies: copy_block between host pools, the pool's own
//                copy (a CUDA copy) when L1 is device memory;
//   int8 tier    the encode on the way down, the decode on the way up
//                (kernels/kv_quant.h), on the device that holds L1 when it
//                offers a codec (DeviceKvCodec), else on the host, an L1
//                block in device memory passing through a host buffer of the
//                calling thread's (the copy worker's, or the engine's when it
//                helps);
//   staging      an int8 store (L3, ...) encodes into and decodes out of
//                staging buffers, aligned as the store asks; an exact store
//                under a device L1 copies through them (a store reaches
//                host memory only: O_DIRECT, a socket); an exact store under
//                a host L1 reads and writes L1 in place and needs none
//                (encode and decode are empty).
//
// By layer: a promotion from an exact L2 into a device L1 may go a layer per
// copy (l2_layers > 1) and a store's read a layer per piece (parts > 1), so a
// request's prefill can start on the first layers (CacheConfig::load_by_layer
// says when; each layer must be a whole number of the mover's alignment).
//
// The functions hold a pointer to the L1 pool, which must outlive them.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "engine/cache/cache_config.h"
#include "engine/cache/radix_cache.h"
#include "engine/cache/store_tiers.h"
#include "engine/model/kv_layout.h"
#include "tiers/block_pool.h"
#include "tiers/copy_worker.h"

namespace kvtier {

// The int8 codec run by the device that holds an L1 in device memory
// (engine/cuda/cuda_kv_codec.h): encode writes the encoding of an L1 block
// into host memory, decode an L1 block from the encoded host bytes, each done
// when it returns, with the host codec's bytes. Only the int8 bytes then
// cross the bus. Thread-safe: the copy worker and the engine call it. Without
// one, int8 tiers under a device L1 encode and decode on the host, the fp32
// block passing through a host buffer.
struct DeviceKvCodec {
  std::function<void(std::byte* host_dst, const std::byte* l1_src)> encode;
  std::function<void(std::byte* l1_dst, const std::byte* host_src)> decode;
};

struct TransferPlan {
  using Transfer = tiers::CopyWorker::Transfer;

  std::size_t block_bytes = 0;     // KvLayout::block_bytes(): a multiple of 64
  std::size_t l2_block_bytes = 0;  // what an L2 slot holds: block_bytes, or the encoded size

  // L1 -> L2 and L2 -> L1, a whole block.
  Transfer to_l2, from_l2;
  // Copies a promotion from L2 takes: n_layer, each one layer_copy of a
  // layer's bytes, or 1 (from_l2 of the whole block).
  int l2_layers = 1;
  // A layer's copy between L1 and an exact L2 whose layers tile the block:
  // by layer, or a block some of whose layers are left behind (sliding
  // windows); empty otherwise.
  Transfer layer_copy;
  // A store tier's way (L3 and below; empty for L1 and L2).
  struct StoreLeg {
    std::size_t block_bytes = 0;  // what an entry holds: block_bytes, or the encoded size
    // Into a staging buffer (from L1 or an exact L2 slot) and out of one
    // into L1; both empty when the store reads and writes L1 in place.
    Transfer encode, decode;
    int parts = 1;  // pieces a read goes in: n_layer, or 1
    bool staged() const { return static_cast<bool>(encode); }
  };
  PerTier<StoreLeg> store;

  // Bytes a block takes in `tier` (before slot rounding).
  std::size_t stored_bytes(Tier tier) const;
};

// The plan for blocks of `layout` in `l1`, under `config`'s L2 format and
// `stores`' formats and needs. `codec` serves int8 tiers when l1 is device
// memory.
TransferPlan make_transfer_plan(const KvLayout& layout, tiers::BlockPool& l1,
                                const CacheConfig& config, std::span<const StoreTierSpec> stores,
                                const DeviceKvCodec& codec);

}  // namespace kvtier
