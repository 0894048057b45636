#include "tiers/remote_value.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace kvtier::tiers {

namespace {

static_assert(std::endian::native == std::endian::little, "values are written little-endian");

constexpr std::uint32_t kValueMagic = 0x3152564b;  // "KVR1"
constexpr std::uint16_t kValueVersion = 1;
constexpr std::uint16_t kHasMac = 1;
constexpr std::size_t kSumAt = 24;  // the checksum covers the header before it

template <typename T>
void put(std::byte* at, T v) {
  std::memcpy(at, &v, sizeof v);
}
template <typename T>
T get(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

std::span<const std::byte> key_bytes(const BlockKey& key) {
  return std::as_bytes(std::span<const BlockKey, 1>(&key, 1));
}

std::uint64_t checksum(const BlockKey& key, std::span<const std::byte> header,
                       std::span<const std::byte> meta, std::span<const std::byte> payload) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::span<const std::byte> part : {key_bytes(key), header, meta, payload})
    XXH3_64bits_update(&state, part.data(), part.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace

const char* to_string(RemoteValueError error) {
  switch (error) {
    case RemoteValueError::kTruncated:
      return "truncated";
    case RemoteValueError::kMagic:
      return "not a kvtier value";
    case RemoteValueError::kVersion:
      return "unknown version";
    case RemoteValueError::kFormat:
      return "another model, layout or format";
    case RemoteValueError::kLength:
      return "wrong length";
    case RemoteValueError::kChecksum:
      return "checksum mismatch";
    case RemoteValueError::kUnauthenticated:
      return "not authenticated";
  }
  return "unknown";
}

std::vector<std::byte> encode_remote_value(const BlockKey& key, const RemoteValueSpec& spec,
                                           std::span<const std::byte> meta,
                                           std::span<const std::byte> payload) {
  const std::size_t mac_bytes = spec.secret ? RemoteSecret::kMacBytes : 0;
  std::vector<std::byte> value(kRemoteHeaderBytes + mac_bytes + meta.size() + payload.size());
  std::byte* h = value.data();
  put<std::uint32_t>(h, kValueMagic);
  put<std::uint16_t>(h + 4, kValueVersion);
  put<std::uint16_t>(h + 6, spec.secret ? kHasMac : 0);
  put<std::uint64_t>(h + 8, spec.format_tag);
  put<std::uint32_t>(h + 16, static_cast<std::uint32_t>(meta.size()));
  put<std::uint32_t>(h + 20, static_cast<std::uint32_t>(payload.size()));
  const std::span<const std::byte> header(h, kSumAt);
  put<std::uint64_t>(h + kSumAt, checksum(key, header, meta, payload));
  if (spec.secret) {
    const auto m = spec.secret->mac({key_bytes(key), header, meta, payload});
    if (!m) return {};
    std::memcpy(h + kRemoteHeaderBytes, m->data(), m->size());
  }
  std::byte* body = h + kRemoteHeaderBytes + mac_bytes;
  std::ranges::copy(meta, body);
  std::ranges::copy(payload, body + meta.size());
  return value;
}

std::expected<RemoteValue, RemoteValueError> decode_remote_value(const BlockKey& key,
                                                                 const RemoteValueSpec& spec,
                                                                 std::span<const std::byte> value) {
  using enum RemoteValueError;
  if (value.size() < kRemoteHeaderBytes) return std::unexpected(kTruncated);
  const std::byte* h = value.data();
  if (get<std::uint32_t>(h) != kValueMagic) return std::unexpected(kMagic);
  if (get<std::uint16_t>(h + 4) != kValueVersion) return std::unexpected(kVersion);
  const std::uint16_t flags = get<std::uint16_t>(h + 6);
  if ((flags & ~kHasMac) != 0) return std::unexpected(kVersion);
  const bool has_mac = (flags & kHasMac) != 0;
  if (has_mac != (spec.secret != nullptr)) return std::unexpected(kUnauthenticated);
  if (get<std::uint64_t>(h + 8) != spec.format_tag) return std::unexpected(kFormat);
  const std::size_t meta_bytes = get<std::uint32_t>(h + 16);
  const std::size_t payload_bytes = get<std::uint32_t>(h + 20);
  if (payload_bytes != spec.payload_bytes) return std::unexpected(kLength);
  const std::size_t mac_bytes = has_mac ? RemoteSecret::kMacBytes : 0;
  const std::size_t want = kRemoteHeaderBytes + mac_bytes + meta_bytes + payload_bytes;
  if (value.size() < want) return std::unexpected(kTruncated);
  if (value.size() > want) return std::unexpected(kLength);
  const std::span<const std::byte> header = value.first(kSumAt);
  const std::span<const std::byte> meta = value.subspan(kRemoteHeaderBytes + mac_bytes, meta_bytes);
  const std::span<const std::byte> payload = value.subspan(want - payload_bytes);
  if (get<std::uint64_t>(h + kSumAt) != checksum(key, header, meta, payload))
    return std::unexpected(kChecksum);
  if (has_mac) {
    const std::span<const std::byte> claimed = value.subspan(kRemoteHeaderBytes, mac_bytes);
    if (!spec.secret->verify(claimed, {key_bytes(key), header, meta, payload}))
      return std::unexpected(kUnauthenticated);
  }
  return RemoteValue{meta, payload};
}

}  // namespace kvtier::tiers
