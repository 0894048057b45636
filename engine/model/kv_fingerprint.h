// The fingerprint of what decides a KV block's bytes, as each model family
// computes it (Model::fingerprint): a stream of values hashed with XXH3-64,
// which starts with what every family shares (the KV layout's version, the
// page size, the KV dtype) and then takes the family's name, its shapes and
// conventions, and every weight. Integers go in as fixed-width
// little-endian bytes (every machine we run on is little-endian), so the
// fingerprint is stable across runs and machines: L3 and the remote tier
// key blocks under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tiers/xxhash_inline.h"

namespace kvtier {

// Bumped whenever the byte layout of a KV block changes (engine/model/kv_layout.h),
// so blocks persisted by an older kvtier are never read as new ones.
inline constexpr std::uint32_t kKvLayoutVersion = 1;

class KvFingerprint {
 public:
  explicit KvFingerprint(int page_size) {
    XXH3_INITSTATE(&state_);
    XXH3_64bits_reset(&state_);
    static constexpr char kTag[] = "kvtier-kv";
    bytes(kTag, sizeof kTag);
    i64(kKvLayoutVersion);
    i64(page_size);
    i64(sizeof(float));  // KV dtype: float32
  }
  void bytes(const void* p, std::size_t n) { XXH3_64bits_update(&state_, p, n); }
  void i64(std::int64_t v) { bytes(&v, sizeof v); }
  void f32(float v) { bytes(&v, sizeof v); }
  void text(std::string_view s) {
    i64(static_cast<std::int64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  // A tensor of n floats, or a marker for an absent (bias-free) one.
  void tensor(const float* p, std::size_t n) {
    i64(p == nullptr ? -1 : static_cast<std::int64_t>(n));
    if (p != nullptr) bytes(p, n * sizeof(float));
  }
  std::uint64_t digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace kvtier
