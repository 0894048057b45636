// How much room a file system has, for the tiers that put files on it: the
// L3 slab and its index count what they need against it before they take
// any of it (tiers/l3_store.h).
//
// Thread-safety: disk_space() asks the kernel and keeps no state.
#pragma once

#include <cstdint>
#include <expected>
#include <string>

namespace kvtier::tiers {

struct DiskSpace {
  std::uint64_t free = 0;   // what an unprivileged writer may still take (statvfs f_bavail)
  std::uint64_t total = 0;  // the file system's size
};

// Of the file system that holds `path`, or would hold it: a path that does
// not exist yet is asked about its nearest existing parent. The error is
// statvfs's.
std::expected<DiskSpace, std::string> disk_space(const std::string& path);

}  // namespace kvtier::tiers
