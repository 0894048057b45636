// The identity of a KV block as the tiers see it: a 128-bit key the engine
// derives (a hash chained over the block's prefix, see engine/cache/block_hash.h).
//
// The tiers never interpret it: it names a block in the L3 index and in the
// maps that say where a block lives. Equal keys mean equal bytes; that
// promise is the engine's to keep.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::tiers {

struct BlockKey {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  auto operator<=>(const BlockKey&) const = default;
  bool is_zero() const { return hi == 0 && lo == 0; }
};

struct BlockKeyHash {
  // The key is already a good hash; mixing the halves is enough.
  // noexcept: the hash tables then keep no copy of it in each entry.
  std::size_t operator()(const BlockKey& k) const noexcept {
    return static_cast<std::size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ULL));
  }
};

// 32 lowercase hex digits, hi first: for logs and the protocol.
std::string to_hex(const BlockKey& key);

// The inverse of to_hex, for keys read from another process: exactly 32 hex
// digits (either case); nullopt for anything else.
std::optional<BlockKey> block_key_from_hex(std::string_view hex);

}  // namespace kvtier::tiers
