// What one daemon's prefix cache holds, as the router knows it: the
// daemon's `cache.subscribe` snapshot with every `cache.events` batch since
// replayed on it (docs/protocol.md).
//
// Invariant: entries_ maps a block key to the tiers the daemon last said it
// holds it in (a bit per Tier), never to an empty set; after a batch that
// did not follow the last one (a gap, a repeat, a batch out of order) the
// index is stale() and matches nothing until a fresh snapshot replaces it,
// so a lost event costs hits, never a route to a daemon that no longer has
// the blocks.
//
// Input from the daemon is validated whole before any of it is applied: a
// batch with an unknown tier, a key that is not 32 hex digits or a missing
// field changes nothing and is refused with the reason (the link then
// subscribes again).
//
// Thread-safety: none; the router's io thread owns it.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <unordered_map>

#include "engine/cache/tier.h"
#include "tiers/block_key.h"

namespace kvtier::router {

// How far a prompt's leading run of full blocks is held: the run's length
// and, for each block, the fastest tier holding it, counted per tier.
struct PrefixMatch {
  int blocks = 0;
  TierCounts by_tier;
};

class BlockIndex {
 public:
  // Replaces everything with a snapshot (`cache.subscribe`'s result),
  // keeping its fingerprint and page size for the link to compare with the
  // fleet's. Refused whole if any part is malformed.
  std::expected<void, std::string> reset(const nlohmann::json& snapshot);

  // Applies one `cache.events` notification's params. A batch whose seq
  // does not follow the last one makes the index stale (an error saying
  // so); a malformed one changes nothing.
  std::expected<void, std::string> apply(const nlohmann::json& batch);

  // Forgets everything (the daemon is down); stale until the next reset().
  void clear();

  // The leading run of `keys` the daemon holds, in any tier. Nothing when
  // stale.
  PrefixMatch match(std::span<const tiers::BlockKey> keys) const;

  bool stale() const { return stale_; }
  std::uint64_t fingerprint() const { return fingerprint_; }
  int page_size() const { return page_size_; }
  std::uint64_t seq() const { return seq_; }
  // Blocks held in each tier.
  const TierCounts& blocks() const { return counts_; }

 private:
  std::unordered_map<tiers::BlockKey, std::uint8_t, tiers::BlockKeyHash> entries_;
  TierCounts counts_;
  std::uint64_t fingerprint_ = 0;
  int page_size_ = 0;
  std::uint64_t seq_ = 0;
  bool stale_ = true;
};

}  // namespace kvtier::router
