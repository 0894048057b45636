#include "engine/block_meta.h"

namespace kvtier {

namespace {

void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::vector<std::byte> encode_block_meta(const tiers::BlockKey& parent, std::uint64_t fingerprint,
                                         std::span<const int> tokens) {
  std::vector<std::byte> out;
  out.reserve(28 + 4 * tokens.size());
  put(out, parent.hi, 8);
  put(out, parent.lo, 8);
  put(out, fingerprint, 8);
  put(out, tokens.size(), 4);
  for (int t : tokens) put(out, static_cast<std::uint32_t>(t), 4);
  return out;
}

}  // namespace kvtier
