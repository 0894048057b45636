#include "engine/cache/block_hash.h"

#include <cstring>
#include <vector>

#include "tiers/xxhash_inline.h"

namespace kvtier {

namespace {

tiers::BlockKey from_xxh128(XXH128_hash_t h) { return {h.high64, h.low64}; }

// Streams values into XXH3-64; integers as fixed-width little-endian bytes
// (every machine we run on is little-endian), so the fingerprint is stable.
class Hasher {
 public:
  Hasher() {
    XXH3_INITSTATE(&state_);
    XXH3_64bits_reset(&state_);
  }
  void bytes(const void* p, std::size_t n) { XXH3_64bits_update(&state_, p, n); }
  void i64(std::int64_t v) { bytes(&v, sizeof v); }
  // A tensor of n floats, or a marker for an absent (bias-free) one.
  void tensor(const float* p, std::size_t n) {
    i64(p == nullptr ? -1 : static_cast<std::int64_t>(n));
    if (p != nullptr) bytes(p, n * sizeof(float));
  }
  std::uint64_t digest() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace

std::uint64_t model_fingerprint(const ModelConfig& c, const ModelWeights& w, int page_size) {
  Hasher h;
  static constexpr char kTag[] = "kvtier-kv";
  h.bytes(kTag, sizeof kTag);
  h.i64(kKvLayoutVersion);
  h.i64(page_size);
  h.i64(sizeof(float));  // KV dtype: float32
  for (long v : {c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.vocab_size, c.block_size}) h.i64(v);
  h.i64(c.bias ? 1 : 0);
  h.i64(static_cast<int>(c.gelu));
  h.i64(static_cast<int>(c.weight_layout));
  h.bytes(&c.layer_norm_eps, sizeof c.layer_norm_eps);

  const std::size_t C = c.n_embd, qkv = C + 2 * static_cast<std::size_t>(c.kv_dim());
  h.tensor(w.wte(), static_cast<std::size_t>(c.vocab_size) * C);
  h.tensor(w.wpe(), static_cast<std::size_t>(c.block_size) * C);
  for (int i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = w.layer(i);
    h.tensor(l.ln_1_w, C);
    h.tensor(l.ln_1_b, C);
    h.tensor(l.attn_qkv_w, C * qkv);
    h.tensor(l.attn_qkv_b, qkv);
    h.tensor(l.attn_proj_w, C * C);
    h.tensor(l.attn_proj_b, C);
    h.tensor(l.ln_2_w, C);
    h.tensor(l.ln_2_b, C);
    h.tensor(l.mlp_fc_w, C * 4 * C);
    h.tensor(l.mlp_fc_b, 4 * C);
    h.tensor(l.mlp_proj_w, 4 * C * C);
    h.tensor(l.mlp_proj_b, C);
  }
  h.tensor(w.ln_f_w(), C);
  h.tensor(w.ln_f_b(), C);
  return h.digest();
}

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
