// Fixed-width little-endian integers, written and read byte by byte so that
// a format made of them is the same on every host: the remote tier's values
// (tiers/remote_value.h) and the engine's block metadata (engine/
// block_meta.h). `bytes` is the field's width, 1 to 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvtier::tiers {

inline void store_le(std::byte* at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

inline std::uint64_t load_le(const std::byte* at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return v;
}

inline void append_le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  out.resize(out.size() + static_cast<std::size_t>(bytes));
  store_le(out.data() + out.size() - static_cast<std::size_t>(bytes), v, bytes);
}

}  // namespace kvtier::tiers
