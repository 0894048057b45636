// What the engine keeps beside a KV block in a store (tiers::BlockRecord's
// opaque metadata): the model fingerprint, the previous block's key and the
// block's tokens. A store keeps these bytes and refuses a read whose stored
// metadata is not the one expected; the engine reads the metadata back when
// it adopts entries from before a restart, and serves a block only when
// they are what its own key promises (the same model, the same tokens).
//
// Encoding, little-endian: parent key (hi, lo: 2 x u64), fingerprint (u64),
// token count (u32), tokens (u32 each): 28 bytes + 4 a token. The L3 index's
// first value format held these very fields (tiers/l3_index_encoding.cpp),
// so entries written before the metadata was opaque read back as the same
// bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tiers/block_key.h"

namespace kvtier {

// `parent` is the zero key for the first block of a chain.
std::vector<std::byte> encode_block_meta(const tiers::BlockKey& parent, std::uint64_t fingerprint,
                                         std::span<const int> tokens);

}  // namespace kvtier
