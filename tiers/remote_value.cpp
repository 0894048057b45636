#include "tiers/remote_value.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "tiers/little_endian.h"
#include "tiers/xxhash_inline.h"

namespace kvtier::tiers {

namespace {

constexpr std::uint32_t kValueMagic = 0x3152564b;  // "KVR1"
constexpr std::uint16_t kValueVersion = 1;
constexpr std::uint16_t kHasMac = 1;
constexpr std::size_t kSumAt = 24;  // the checksum covers the header before it

// The key as it is hashed and signed: hi, then lo.
std::array<std::byte, 16> key_bytes(const BlockKey& key) {
  std::array<std::byte, 16> out;
  store_le(out.data(), key.hi, 8);
  store_le(out.data() + 8, key.lo, 8);
  return out;
}

// With `copy_to`, the payload is also copied there, a piece at a time, each
// piece hashed while it is still in cache: one pass over a block-sized
// payload in memory instead of two.
std::uint64_t checksum(std::span<const std::byte> key, std::span<const std::byte> header,
                       std::span<const std::byte> meta, std::span<const std::byte> payload,
                       std::byte* copy_to = nullptr) {
  constexpr std::size_t kPiece = 32 << 10;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::span<const std::byte> part : {key, header, meta})
    XXH3_64bits_update(&state, part.data(), part.size());
  if (copy_to == nullptr) {
    XXH3_64bits_update(&state, payload.data(), payload.size());
  } else {
    for (std::size_t at = 0; at < payload.size(); at += kPiece) {
      const std::size_t n = std::min(kPiece, payload.size() - at);
      XXH3_64bits_update(&state, payload.data() + at, n);
      std::memcpy(copy_to + at, payload.data() + at, n);
    }
  }
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
  store_le(h, kValueMagic, 4);
  store_le(h + 4, kValueVersion, 2);
  store_le(h + 6, spec.secret ? kHasMac : 0, 2);
  store_le(h + 8, spec.format_tag, 8);
  store_le(h + 16, static_cast<std::uint32_t>(meta.size()), 4);
  store_le(h + 20, static_cast<std::uint32_t>(payload.size()), 4);
  const std::span<const std::byte> header(h, kSumAt);
  const auto k = key_bytes(key);
  store_le(h + kSumAt, checksum(k, header, meta, payload), 8);
  if (spec.secret) {
    const auto m = spec.secret->mac({k, header, meta, payload});
    if (!m) return {};
    std::ranges::copy(*m, h + kRemoteHeaderBytes);
  }
  std::byte* body = h + kRemoteHeaderBytes + mac_bytes;
  std::ranges::copy(meta, body);
  std::ranges::copy(payload, body + meta.size());
  return value;
}

namespace {

struct Header {
  bool has_mac = false;
  std::size_t meta_bytes = 0;
};

// The fields of a value's header that can be checked without the rest.
std::expected<Header, RemoteValueError> check_header(const RemoteValueSpec& spec,
                                                     std::span<const std::byte> value) {
  using enum RemoteValueError;
  if (value.size() < kRemoteHeaderBytes) return std::unexpected(kTruncated);
  const std::byte* h = value.data();
  if (load_le(h, 4) != kValueMagic) return std::unexpected(kMagic);
  if (load_le(h + 4, 2) != kValueVersion) return std::unexpected(kVersion);
  const auto flags = static_cast<std::uint16_t>(load_le(h + 6, 2));
  if ((flags & ~kHasMac) != 0) return std::unexpected(kVersion);
  const bool has_mac = (flags & kHasMac) != 0;
  if (has_mac != (spec.secret != nullptr)) return std::unexpected(kUnauthenticated);
  if (load_le(h + 8, 8) != spec.format_tag) return std::unexpected(kFormat);
  if (load_le(h + 20, 4) != spec.payload_bytes) return std::unexpected(kLength);
  return Header{has_mac, static_cast<std::size_t>(load_le(h + 16, 4))};
}

}  // namespace

std::expected<std::span<const std::byte>, RemoteValueError> peek_remote_meta(
    const RemoteValueSpec& spec, std::span<const std::byte> prefix) {
  const auto header = check_header(spec, prefix);
  if (!header) return std::unexpected(header.error());
  const std::size_t at = kRemoteHeaderBytes + (header->has_mac ? RemoteSecret::kMacBytes : 0);
  if (prefix.size() < at + header->meta_bytes) return std::unexpected(RemoteValueError::kTruncated);
  return prefix.subspan(at, header->meta_bytes);
}

std::expected<RemoteValue, RemoteValueError> decode_remote_value(const BlockKey& key,
                                                                 const RemoteValueSpec& spec,
                                                                 std::span<const std::byte> value,
                                                                 std::byte* payload_to) {
  using enum RemoteValueError;
  const auto header = check_header(spec, value);
  if (!header) return std::unexpected(header.error());
  const std::size_t meta_bytes = header->meta_bytes;
  const std::size_t payload_bytes = spec.payload_bytes;
  const std::size_t mac_bytes = header->has_mac ? RemoteSecret::kMacBytes : 0;
  const std::size_t want = kRemoteHeaderBytes + mac_bytes + meta_bytes + payload_bytes;
  if (value.size() < want) return std::unexpected(kTruncated);
  if (value.size() > want) return std::unexpected(kLength);
  const std::byte* h = value.data();
  const std::span<const std::byte> header_bytes = value.first(kSumAt);
  const std::span<const std::byte> meta = value.subspan(kRemoteHeaderBytes + mac_bytes, meta_bytes);
  const std::span<const std::byte> payload = value.subspan(want - payload_bytes);
  const auto k = key_bytes(key);
  if (load_le(h + kSumAt, 8) != checksum(k, header_bytes, meta, payload, payload_to))
    return std::unexpected(kChecksum);
  if (header->has_mac) {
    const std::span<const std::byte> claimed = value.subspan(kRemoteHeaderBytes, mac_bytes);
    if (!spec.secret->verify(claimed, {k, header_bytes, meta, payload}))
      return std::unexpected(kUnauthenticated);
  }
  return RemoteValue{meta, payload};
}

}  // namespace kvtier::tiers
