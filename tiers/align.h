// Rounding sizes up to an alignment: O_DIRECT slots to 4 KiB, pools to huge
// pages. One definition for the tiers and the engine above them.
#pragma once

#include <cstddef>

namespace kvtier::tiers {

// The least multiple of `to` that is >= n. REQUIRES: to > 0.
constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace kvtier::tiers
