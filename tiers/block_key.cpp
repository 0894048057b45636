#include "tiers/block_key.h"

namespace kvtier::tiers {

std::string to_hex(const BlockKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(key.hi >> (4 * i)) & 0xF];
    out[31 - i] = kDigits[(key.lo >> (4 * i)) & 0xF];
  }
  return out;
}

std::optional<BlockKey> block_key_from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  BlockKey key;
  for (std::size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    std::uint64_t digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<std::uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<std::uint64_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<std::uint64_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    std::uint64_t& half = i < 16 ? key.hi : key.lo;
    half = (half << 4) | digit;
  }
  return key;
}

}  // namespace kvtier::tiers
