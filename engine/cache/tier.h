// The cache's tiers, fastest first, and a figure per tier.
//
//   L1  the engine's block pool: a cached block there is shared at once;
//   L2  a pinned host pool (or the host memory a device L1's link offers);
//   L3  the SSD store;
//   remote  Redis, shared by a fleet of daemons (tiers/redis_store.h).
//
// From kFirstStoreTier down, a tier is a store (tiers/block_store.h) that
// the cache drives through one set of paths (engine/cache/store_tiers.h says
// which stores a configuration opens). Adding such a tier is:
//   1. an enumerator here (its place says how fast it is) and its names row;
//   2. its store, one file behind tiers::BlockStore;
//   3. its spec in store_tiers.cpp: how to open it, where it is, and its
//      words for the start-up line;
//   4. its settings: fields of CacheConfig and rows of the daemon's
//      settings table (daemon/settings_table.cpp), and of docs/protocol.md's
//      (tests/settings_doc_test.cpp holds the two together).
// No code outside this file names the tiers or counts them
// (tests/tier_test.cpp holds every source to that): the daemon, kvtierctl,
// the router and the benches iterate kTierNames for every surface (the
// start-up line, `tiers`, `stats`, `cache.flush`, /metrics, `kvtierctl
// tiers`, the load generator's tables; tests/ctl_test.cpp
// EveryTierShowsUpOnEverySurface).
//
// PerTier is the one type for "so many per tier" (blocks, tokens, hits,
// stats): in the cache, the scheduler's cached_tokens, the daemon's answers
// (daemon/cache_methods.h), the router and the load generator
// (bench/loadgen_*), so that a tier added here is counted there at once.
#pragma once

#include <array>
#include <cstddef>

namespace kvtier {

enum class Tier { kL1 = 0, kL2 = 1, kL3 = 2, kRemote = 3 };
inline constexpr int kNumTiers = 4;
inline constexpr Tier kFirstStoreTier = Tier::kL3;

constexpr bool is_store_tier(Tier tier) {
  return static_cast<int>(tier) >= static_cast<int>(kFirstStoreTier);
}

// Each tier's names, in tier order.
struct TierNames {
  const char* name;   // in the protocol, settings and logs: "l1"
  const char* label;  // in prose (log lines, warnings): "L1"
};
inline constexpr TierNames kTierNames[kNumTiers] = {
    {"l1", "L1"}, {"l2", "L2"}, {"l3", "L3"}, {"remote", "remote"}};

constexpr const char* to_string(Tier tier) { return kTierNames[static_cast<int>(tier)].name; }
constexpr const char* label(Tier tier) { return kTierNames[static_cast<int>(tier)].label; }

template <typename T>
struct PerTier {
  std::array<T, kNumTiers> values{};

  T& operator[](Tier t) { return values[static_cast<std::size_t>(t)]; }
  const T& operator[](Tier t) const { return values[static_cast<std::size_t>(t)]; }
  T& operator[](int t) { return values[static_cast<std::size_t>(t)]; }
  const T& operator[](int t) const { return values[static_cast<std::size_t>(t)]; }
  static constexpr int size() { return kNumTiers; }
  auto begin() { return values.begin(); }
  auto end() { return values.end(); }
  auto begin() const { return values.begin(); }
  auto end() const { return values.end(); }
  T total() const {
    T sum{};
    for (const T& v : values) sum += v;
    return sum;
  }
  bool operator==(const PerTier&) const = default;
};

// Blocks or tokens per tier.
using TierCounts = PerTier<int>;

}  // namespace kvtier
