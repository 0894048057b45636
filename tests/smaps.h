// What the kernel says of the mapping that holds an address: one field of its
// entry in /proc/self/smaps. For tests that check where memory lives (resident
// pages, huge-page eligibility) without guessing from timings.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace kvtier::test_util {

// The value of `field` ("Rss", "THPeligible", ...) for the mapping that
// holds p, as written after the colon with the leading blanks gone ("1024
// kB", "1"); nullopt when no mapping holds p or it has no such field.
inline std::optional<std::string> smaps_field(const void* p, std::string_view field) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::string prefix = std::string(field) + ":";
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    if (std::istringstream(line) >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.starts_with(prefix)) {
      const std::size_t value = line.find_first_not_of(' ', prefix.size());
      return value == std::string::npos ? "" : line.substr(value);
    }
  }
  return std::nullopt;
}

}  // namespace kvtier::test_util
