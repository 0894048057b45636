// KvCache's L3 parts, for the cache's own files (kv_cache*.cpp,
// cost_calibration.cpp) only: the store, its staging buffers and what is in
// flight. Not part of the cache's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "engine/kv_cache.h"
#include "tiers/block_pool.h"
#include "tiers/block_store.h"

namespace kvtier {

// What an L3 operation in flight is for, by ticket.
struct KvCache::L3Parts {
  // With a staged L3 (TransferPlan::l3_staged: int8, or L1 in device memory):
  // page-aligned buffers (O_DIRECT) for the bytes of writes from L1 or an
  // exact L2 (encoded, or copied off the device), and for reads until poll()
  // decodes or copies them into their L1 block. Never runs out: each buffer
  // in use goes with an L1 block (a read into it, or a write from it holding
  // a reference) or an L2 slot (its node is writing, so the slot stays), and
  // there is one buffer per L1 block and L2 slot. Declared before the store,
  // so it outlives the store's final drain.
  std::unique_ptr<tiers::BlockPool> staging;
  std::unique_ptr<tiers::BlockStore> store;  // an L3Store
  struct Pending {
    tiers::BlockKey key;
    bool is_write = false;
    int l1_source = -1;  // write from L1: the block whose extra reference we hold
    int staging = -1;    // the staging buffer the bytes pass through, or -1
    std::chrono::steady_clock::time_point start;
  };
  std::unordered_map<std::uint64_t, Pending> pending;
  // Reads in pieces (TransferPlan::l3_parts > 1) still in flight, by block:
  // a request that finds one of its blocks loading can take the read over as
  // its LayerLoad.
  std::unordered_map<tiers::BlockKey, std::uint64_t, tiers::BlockKeyHash> reads_by_layer;
};

}  // namespace kvtier
