#include "tiers/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvtier::tiers {

std::expected<DiskSpace, std::string> disk_space(const std::string& path) {
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(path, ec);
  if (ec) return std::unexpected(path + ": " + ec.message());
  struct statvfs fs {};
  while (::statvfs(at.c_str(), &fs) != 0) {
    if (errno != ENOENT || at == at.parent_path())
      return std::unexpected("statvfs " + at.string() + ": " + std::strerror(errno));
    at = at.parent_path();
  }
  return DiskSpace{static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize,
                   static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize};
}

}  // namespace kvtier::tiers
