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

}  // namespace kvtier::tiers
