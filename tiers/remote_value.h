// The bytes of one block in the remote tier: a header, then the owner's
// metadata (tiers/block_store.h: opaque here), then the payload. Values are
// content-addressed and immutable (written with SET NX under the block's
// key): a value is only ever checked, never updated.
//
//   offset  bytes
//        0      4  magic "KVR1"
//        4      2  version (1)
//        6      2  flags: bit 0, an HMAC follows the header
//        8      8  format tag (model, layout, format, page size: what the
//                  owner's StoreParams::format_tag says)
//       16      4  metadata bytes
//       20      4  payload bytes
//       24      8  checksum: XXH3-64 over the block's key, bytes 0..24,
//                  the metadata and the payload
//       32     32  HMAC-SHA256 over the same, under the fleet's secret
//                  (tiers/remote_secret.h), when flag bit 0 is set
//  then metadata, then payload. Integers little-endian.
//
// Fail closed: decode_remote_value() accepts a value only when every field
// is the one expected and the checksum (and, with a secret, the HMAC) holds
// over the key it was read under, so a value of another model, format,
// length or key, a corrupt one, and one a writer without the secret made
// are all refused with the reason. With a secret configured a value without
// an HMAC is refused, and without one a value with an HMAC is refused too
// (it cannot be checked): a fleet shares one secret, or none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <vector>

#include "tiers/block_key.h"
#include "tiers/remote_secret.h"

namespace kvtier::tiers {

// What a store expects of every value it reads and makes of every one it
// writes.
struct RemoteValueSpec {
  std::uint64_t format_tag = 0;
  std::size_t payload_bytes = 0;
  const RemoteSecret* secret = nullptr;  // null: no HMAC
};

enum class RemoteValueError {
  kTruncated,        // shorter than its header says
  kMagic,            // not a kvtier value
  kVersion,          // a version this build does not read
  kFormat,           // another model, layout or format
  kLength,           // a payload of another size, or bytes past the end
  kChecksum,         // bytes changed, or a value of another key
  kUnauthenticated,  // the HMAC is wrong or missing, or cannot be checked
};
const char* to_string(RemoteValueError error);

inline constexpr std::size_t kRemoteHeaderBytes = 32;

// The value for a block; empty should the HMAC not be made (OpenSSL failed).
std::vector<std::byte> encode_remote_value(const BlockKey& key, const RemoteValueSpec& spec,
                                           std::span<const std::byte> meta,
                                           std::span<const std::byte> payload);

struct RemoteValue {
  std::span<const std::byte> meta, payload;  // inside the value given
};
// With `payload_to`, the payload is also copied there as it is checked (in
// one pass over it, not two); those bytes mean nothing unless the value is
// accepted.
std::expected<RemoteValue, RemoteValueError> decode_remote_value(const BlockKey& key,
                                                                 const RemoteValueSpec& spec,
                                                                 std::span<const std::byte> value,
                                                                 std::byte* payload_to = nullptr);

// A lookup reads only a value's first bytes (GETRANGE 0 kRemotePeekBytes-1)
// to learn whether it is there and what metadata it claims. Those are
// unchecked: the header's fields are, but the checksum and HMAC cover the
// payload, so only decode_remote_value() of the whole value may let bytes be
// served. nullopt meta: the prefix is too short to hold it (metadata longer
// than kRemotePeekBytes allows).
inline constexpr std::size_t kRemotePeekBytes = 4096;
std::expected<std::span<const std::byte>, RemoteValueError> peek_remote_meta(
    const RemoteValueSpec& spec, std::span<const std::byte> prefix);

}  // namespace kvtier::tiers
