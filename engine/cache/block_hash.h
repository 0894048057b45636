// Block identity: the hash chain over full blocks, rooted in the model's
// fingerprint (Model::fingerprint, engine/model/kv_fingerprint.h).
//
// A full block's key chains its parent's: key_i = H(key_{i-1}, tokens_i), and
// key_0 (the root) = H(fingerprint, cache_salt). So one key names a whole
// prefix, not just the block's own tokens: equal keys mean the same tokens
// from position 0 under the same model, layout and salt, hence (the forward
// pass being deterministic and batch-invariant) bit-identical KV bytes. That
// is what lets the radix tree, the L2 pool and the L3 store across restarts
// share blocks by key alone, and what keeps one model's, one page size's or
// one tenant's blocks from ever being served to another.
//
// H is XXH3-128: collisions are not a practical concern, and the L3 index
// still stores the tokens so a lookup can compare them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tiers/block_key.h"

namespace kvtier {

// The root of a request's chain: requests with different salts never share a
// block. An empty salt is the default namespace.
tiers::BlockKey root_key(std::uint64_t fingerprint, std::string_view cache_salt);

// The key of the full block holding `tokens` (page_size of them) after `parent`.
tiers::BlockKey chain_key(const tiers::BlockKey& parent, std::span<const int> tokens);

// The keys of the whole blocks of `tokens` (page_size each) after `root`, in
// order; a partial block at the end has none. REQUIRES: page_size >= 1.
std::vector<tiers::BlockKey> chain_keys(const tiers::BlockKey& root, std::span<const int> tokens,
                                        int page_size);

}  // namespace kvtier
