#include "engine/cache/block_meta.h"

#include "tiers/little_endian.h"

namespace kvtier {

std::vector<std::byte> encode_block_meta(const tiers::BlockKey& parent, std::uint64_t fingerprint,
                                         std::span<const int> tokens) {
  std::vector<std::byte> out;
  out.reserve(28 + 4 * tokens.size());
  using tiers::append_le;
  append_le(out, parent.hi, 8);
  append_le(out, parent.lo, 8);
  append_le(out, fingerprint, 8);
  append_le(out, tokens.size(), 4);
  for (int t : tokens) append_le(out, static_cast<std::uint32_t>(t), 4);
  return out;
}

}  // namespace kvtier
