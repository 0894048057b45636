// KvCache's store tiers (L3 and below), for the cache's own files
// (kv_cache*.cpp, cost_calibration.cpp) only: each store, its staging
// buffers and what is in flight on it. Not part of the cache's interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "engine/cache/kv_cache.h"
#include "tiers/block_pool.h"
#include "tiers/block_store.h"

namespace kvtier {

struct KvCache::StoreTier {
  Tier tier = kFirstStoreTier;
  KvFormat format = KvFormat::kExact;
  WritePolicy write_policy = WritePolicy::kWriteBack;
  const TransferPlan::StoreLeg* leg = nullptr;  // the plan's, for this tier
  // With a staged store (TransferPlan::StoreLeg::staged: int8, or L1 in
  // device memory): buffers aligned as the store asks, for the bytes of
  // writes from L1 or an L2 slot in another format (encoded, or copied off
  // the device), and for reads until poll() decodes or copies them into their
  // L1 block. Never runs out: each buffer in use goes with an L1 block (a
  // read into it, or a write from it holding a reference) or an L2 slot (its
  // node is writing, so the slot stays), and there is one buffer per L1 block
  // and L2 slot. Declared before the store, so it outlives the store's final
  // drain.
  std::unique_ptr<tiers::BlockPool> staging;
  std::unique_ptr<tiers::BlockStore> store;
  // What an operation in flight is for, by ticket.
  struct Pending {
    tiers::BlockKey key;
    bool is_write = false;
    int l1_source = -1;  // write from L1: the block whose extra reference we hold
    int staging = -1;    // the staging buffer the bytes pass through, or -1
    std::chrono::steady_clock::time_point start;
  };
  std::unordered_map<std::uint64_t, Pending> pending;
};

}  // namespace kvtier
