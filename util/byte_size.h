// Byte counts as people read them, for messages and logs.
#pragma once

#include <cstdint>
#include <string>

namespace kvtier::util {

// "1.5 GiB", "512 MiB", "3.0 KiB", "100 bytes": powers of 1024, one decimal
// from KiB up.
std::string bytes_text(std::uint64_t bytes);

}  // namespace kvtier::util
