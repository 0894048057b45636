// What the kernel says of the mapping that holds an address: one field of its
// entry in /proc/self/smaps. For tests that check where memory lives (resident
// pages, huge-page eligibility) without guessing from timings.
#pragma once

#include <cstdint>
#include <filesystem>
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

// Resident kB of the mapping that holds `p`; -1 if no mapping holds it.
inline long resident_kb_of_mapping(const void* p) {
  const std::optional<std::string> rss = smaps_field(p, "Rss");
  long kb = -1;
  if (rss) std::istringstream(*rss) >> kb;
  return kb;
}

// Whether `p` lies inside a mapping of the file `path` (/proc/self/maps).
inline bool in_file_mapping(const void* p, const std::filesystem::path& path) {
  const std::string target = std::filesystem::canonical(path).string();
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (!line.ends_with(target)) continue;
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream(line) >> std::hex >> begin >> dash >> end;
    if (addr >= begin && addr < end) return true;
  }
  return false;
}

}  // namespace kvtier::test_util
