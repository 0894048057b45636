#include "engine/cache/block_hash.h"

#include <cstring>
#include <vector>

#include "tiers/xxhash_inline.h"

namespace kvtier {

namespace {

tiers::BlockKey from_xxh128(XXH128_hash_t h) { return {h.high64, h.low64}; }

}  // namespace

tiers::BlockKey root_key(std::uint64_t fingerprint, std::string_view cache_salt) {
  std::vector<unsigned char> buf(sizeof fingerprint + cache_salt.size());
  std::memcpy(buf.data(), &fingerprint, sizeof fingerprint);
  if (!cache_salt.empty())
    std::memcpy(buf.data() + sizeof fingerprint, cache_salt.data(), cache_salt.size());
  return from_xxh128(XXH3_128bits(buf.data(), buf.size()));
}

tiers::BlockKey chain_key(const tiers::BlockKey& parent, std::span<const int> tokens) {
  // Seeding with the parent would only use 64 of its bits; hash it as data.
  static_assert(sizeof(int) == sizeof(std::int32_t));
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, &parent.hi, sizeof parent.hi);
  XXH3_128bits_update(&state, &parent.lo, sizeof parent.lo);
  XXH3_128bits_update(&state, tokens.data(), tokens.size_bytes());
  return from_xxh128(XXH3_128bits_digest(&state));
}

std::vector<tiers::BlockKey> chain_keys(const tiers::BlockKey& root, std::span<const int> tokens,
                                        int page_size) {
  const std::size_t page = static_cast<std::size_t>(page_size);
  std::vector<tiers::BlockKey> keys;
  keys.reserve(tokens.size() / page);
  tiers::BlockKey key = root;
  for (std::size_t b = 0; (b + 1) * page <= tokens.size(); ++b) {
    key = chain_key(key, tokens.subspan(b * page, page));
    keys.push_back(key);
  }
  return keys;
}

}  // namespace kvtier
