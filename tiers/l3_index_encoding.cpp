// The index's on-disk encodings (declared in l3_index.h): keys, entry
// values and the format record, each a fixed byte layout independent of the
// host, values and the record behind a version byte.
#include <string>
#include <string_view>

#include "tiers/l3_index.h"
#include "tiers/xxhash_inline.h"

namespace kvtier::tiers {

namespace {

// Version 3: version, offset, length, checksum, last_use, piece count (a
// byte, at most kMaxPieces), the pieces' checksums, metadata length, then the
// metadata. Version 2 (read, never written) is version 3 without the pieces.
// Version 1 (read, never written) had, where 2 has the
// metadata, the fields the engine's metadata now holds (engine/cache/block_meta.h):
// parent key and fingerprint before last_use, token count and tokens after
// it; read back, they are the same bytes in the same order, so entries of
// either version name the same blocks.
constexpr std::uint8_t kValueVersion = 3;
constexpr std::uint8_t kValueVersion2 = 2;
constexpr std::uint8_t kValueVersion1 = 1;
constexpr std::size_t kValueHeaderBytes = 1 + 8 + 4 + 8 + 8 + 1 + 4;
constexpr std::size_t kMaxPieces = 64;
// Far above any owner's metadata (the engine's: 28 bytes + 4 a token), so a
// corrupt length cannot ask for gigabytes.
constexpr std::size_t kMaxMetaBytes = 1 << 20;
constexpr std::uint8_t kMetaVersion = 1;
constexpr std::size_t kMetaBytes = 1 + 8 + 8;

// Fixed-width little-endian fields, byte by byte so the format does not
// depend on the host.
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64_be(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Reads fields off the front of a byte range; every get checks the length.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  std::optional<std::uint64_t> u64() { return uint(8); }
  std::optional<std::uint32_t> u32() {
    auto v = uint(4);
    if (!v) return std::nullopt;
    return static_cast<std::uint32_t>(*v);
  }
  std::optional<std::uint8_t> u8() {
    auto v = uint(1);
    if (!v) return std::nullopt;
    return static_cast<std::uint8_t>(*v);
  }
  std::size_t left() const { return bytes_.size(); }
  // The next n bytes, as they are.
  std::optional<std::string_view> bytes(std::size_t n) {
    if (failed_ || bytes_.size() < n) {
      failed_ = true;
      return std::nullopt;
    }
    const std::string_view out = bytes_.substr(0, n);
    bytes_.remove_prefix(n);
    return out;
  }

 private:
  // Once a read has failed, every later one fails too: a field read after a
  // missing one would otherwise come from the bytes the missing one lacked.
  std::optional<std::uint64_t> uint(int n) {
    if (failed_ || bytes_.size() < static_cast<std::size_t>(n)) {
      failed_ = true;
      return std::nullopt;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes_[i])) << (8 * i);
    bytes_.remove_prefix(n);
    return v;
  }
  std::string_view bytes_;
  bool failed_ = false;
};

std::uint64_t get_u64_be(std::string_view b) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

}  // namespace

std::uint64_t piece_checksum_of(std::span<const std::uint64_t> pieces) {
  std::string bytes;  // little-endian, as the index stores them: the same on any host
  bytes.reserve(pieces.size_bytes());
  for (std::uint64_t piece : pieces) put_u64(bytes, piece);
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string L3Index::encode_key(const BlockKey& key) {
  std::string out(1, kEntryPrefix);
  put_u64_be(out, key.hi);
  put_u64_be(out, key.lo);
  return out;
}

std::optional<BlockKey> L3Index::decode_key(std::string_view bytes) {
  if (bytes.size() != 17 || bytes[0] != kEntryPrefix) return std::nullopt;
  return BlockKey{get_u64_be(bytes.substr(1)), get_u64_be(bytes.substr(9))};
}

std::string L3Index::encode_value(const L3Entry& e) {
  std::string out;
  out.reserve(kValueHeaderBytes + 8 * e.pieces.size() + e.record.meta.size());
  out.push_back(static_cast<char>(kValueVersion));
  put_u64(out, e.offset);
  put_u32(out, e.length);
  put_u64(out, e.checksum);
  put_u64(out, e.last_use);
  out.push_back(static_cast<char>(e.pieces.size()));
  for (std::uint64_t piece : e.pieces) put_u64(out, piece);
  put_u32(out, static_cast<std::uint32_t>(e.record.meta.size()));
  for (std::byte b : e.record.meta) out.push_back(static_cast<char>(b));
  return out;
}

namespace {

void append(std::vector<std::byte>& out, std::string_view bytes) {
  for (char c : bytes) out.push_back(static_cast<std::byte>(c));
}

// A version 1 value after its version byte (see kValueVersion).
std::optional<L3Entry> decode_value_v1(Reader& r, L3Entry e) {
  const auto offset = r.u64();
  const auto length = r.u32();
  const auto checksum = r.u64();
  const auto parent_and_fingerprint = r.bytes(24);
  const auto last_use = r.u64();
  const auto count_bytes = r.bytes(4);
  if (!count_bytes) return std::nullopt;  // a failed read fails the rest: every field is present
  // Exactly the tokens it announces: nothing missing, nothing trailing.
  const std::uint32_t count = *Reader(*count_bytes).u32();
  if (r.left() != static_cast<std::size_t>(count) * 4 || r.left() > kMaxMetaBytes)
    return std::nullopt;
  e.offset = *offset;
  e.length = *length;
  e.checksum = *checksum;
  e.last_use = *last_use;
  append(e.record.meta, *parent_and_fingerprint);
  append(e.record.meta, *count_bytes);
  append(e.record.meta, *r.bytes(r.left()));
  return e;
}

}  // namespace

std::optional<L3Entry> L3Index::decode_value(const BlockKey& key, std::string_view bytes) {
  Reader r(bytes);
  L3Entry e;
  e.record.key = key;
  const auto version = r.u8();
  if (version && *version == kValueVersion1) return decode_value_v1(r, std::move(e));
  if (!version || (*version != kValueVersion && *version != kValueVersion2)) return std::nullopt;
  const auto offset = r.u64();
  const auto length = r.u32();
  const auto checksum = r.u64();
  const auto last_use = r.u64();
  if (*version == kValueVersion) {
    // Pieces that do not hash to the checksum were not written together.
    const auto count = r.u8();
    if (!count || *count > kMaxPieces) return std::nullopt;
    for (int i = 0; i < *count; ++i)
      if (const auto piece = r.u64()) e.pieces.push_back(*piece);
    if (e.pieces.size() != *count || (*count > 0 && piece_checksum_of(e.pieces) != *checksum))
      return std::nullopt;
  }
  const auto meta_bytes = r.u32();
  if (!meta_bytes) return std::nullopt;  // a failed read fails the rest: every field is present
  // Exactly the metadata it announces: nothing missing, nothing trailing. The
  // check comes before any allocation, so a corrupt length cannot ask for
  // gigabytes.
  if (r.left() != *meta_bytes || *meta_bytes > kMaxMetaBytes) return std::nullopt;
  e.offset = *offset;
  e.length = *length;
  e.checksum = *checksum;
  e.last_use = *last_use;
  append(e.record.meta, *r.bytes(*meta_bytes));
  return e;
}

std::string L3Index::encode_meta(const Format& format) {
  std::string out;
  out.push_back(static_cast<char>(kMetaVersion));
  put_u64(out, format.format_tag);
  put_u64(out, format.block_bytes);
  return out;
}

std::optional<L3Index::Format> L3Index::decode_meta(std::string_view bytes) {
  Reader r(bytes);
  const auto version = r.u8();
  const auto format_tag = r.u64();
  const auto block_bytes = r.u64();
  if (bytes.size() != kMetaBytes || !version || *version != kMetaVersion) return std::nullopt;
  return Format{*format_tag, *block_bytes};
}

}  // namespace kvtier::tiers
