// The cache's tiers, fastest first, and a figure per tier.
//
//   L1  the engine's block pool: a cached block there is shared at once;
//   L2  a pinned host pool (or the host memory a device L1's link offers);
//   L3  the SSD store.
//
// PerTier is the one type for "so many per tier" (blocks, tokens, hits,
// stats) everywhere: the cache, the scheduler's cached_tokens, the
// protocol, kvtierctl and the benches, so that a tier added here is counted
// everywhere at once.
#pragma once

#include <array>
#include <cstddef>

namespace kvtier {

enum class Tier { kL1 = 0, kL2 = 1, kL3 = 2 };
inline constexpr int kNumTiers = 3;

// "l1", "l2", "l3": the tiers' names in the protocol and in logs.
constexpr const char* to_string(Tier tier) {
  switch (tier) {
    case Tier::kL1:
      return "l1";
    case Tier::kL2:
      return "l2";
    case Tier::kL3:
      return "l3";
  }
  return "unknown";
}

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
