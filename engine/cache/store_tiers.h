// Which store tiers (tier.h: L3 and below) a configuration opens, and what
// the cache must know of each before opening it. The one place a store
// joins the cache: adding a tier is its store (a tiers::BlockStore), its
// settings, and one spec made here; every path through the cache (reads,
// writes, write-back, adoption after a restart, calibration, stats) is the
// same for every store tier, and so is everything the daemon and kvtierctl
// say of it (start-up lines through KvCache::describe, `tiers`, `stats`,
// /metrics), which iterate the tiers of tier.h.
//
// Order: the specs come fastest first, in tier order. A block is read from
// the fastest store that has it, adopted after a restart from the first
// that knows it, and written to each tier as that tier's write policy says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cache/cache_config.h"
#include "engine/cache/cache_stats.h"
#include "engine/cache/tier.h"
#include "tiers/block_store.h"

namespace kvtier {

// What the cache gives a store it opens.
struct StoreParams {
  std::size_t block_bytes = 0;  // payload bytes of a block, in the tier's format
  // Changes with the model, the layout and the format: a store written under
  // another tag must not serve (it starts empty, or keeps nothing of it).
  std::uint64_t format_tag = 0;
  // Pieces each checked apart (tiers::L3Options::checksum_parts): a block's
  // layers when reads come a layer at a time, so that a read can leave out
  // layers no query will look at; else 1.
  int checksum_parts = 1;
  std::function<void()> on_completion;  // wakes a sleeping engine
};

struct StoreTierSpec {
  Tier tier = kFirstStoreTier;
  KvFormat format = KvFormat::kExact;
  WritePolicy write_policy = WritePolicy::kWriteBack;
  // The buffers the store is handed (and their lengths) are multiples of
  // this (O_DIRECT: a page), and so are L1's blocks when the store reads
  // and writes them in place.
  std::size_t alignment = 64;
  int max_parts = 1;  // pieces a read may come in (tiers::BlockStore::max_parts)
  std::function<std::expected<std::unique_ptr<tiers::BlockStore>, std::string>(const StoreParams&)>
      open;
  // What the operator gave for where it is (a path, Redis addresses): the
  // log names the tier by it when it will not open.
  std::string where;
  // The start-up line's words for the open tier, from its stats then:
  // "4096 blocks in /srv/l3 (write-back, 12 recovered from the last run)".
  std::function<std::string(const TierStats&)> describe;
};

// The store tiers `config` asks for, fastest first (none for an L1 + L2
// cache).
std::vector<StoreTierSpec> store_tiers(const CacheConfig& config);

}  // namespace kvtier
