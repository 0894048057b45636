#include "tiers/host_memory.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace kvtier::tiers {

namespace {

// The number a file holds on its first line; nullopt for "max", a missing
// file or anything else.
std::optional<std::uint64_t> number_in(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// MemTotal and MemAvailable, in bytes.
std::optional<HostMemory> meminfo() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  std::optional<std::uint64_t> total, available;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    std::uint64_t kib = 0;
    if (!(fields >> name >> kib)) continue;
    if (name == "MemTotal:") total = kib * 1024;
    if (name == "MemAvailable:") available = kib * 1024;
  }
  if (!total || !available) return std::nullopt;
  return HostMemory{*total, *available};
}

// Narrows `m` to a cgroup's limit. What the group uses now is not
// subtracted: its count includes page cache the kernel would reclaim first,
// and refusing a size that fits is worse than the OOM killer's verdict on
// one that does not.
void narrow(HostMemory& m, std::optional<std::uint64_t> limit) {
  if (!limit) return;
  m.total = std::min(m.total, *limit);
  m.available = std::min(m.available, *limit);
}

// The process's cgroup path in the hierarchy `controller` names in
// /proc/self/cgroup ("" for cgroup v2's unified one).
std::optional<std::string> cgroup_path(std::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "<id>:<controllers>:<path>"
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string_view controllers(line.data() + first + 1, second - first - 1);
    if (controllers == controller) return line.substr(second + 1);
  }
  return std::nullopt;
}

}  // namespace

std::optional<HostMemory> host_memory() {
  auto m = meminfo();
  if (!m) return std::nullopt;
  namespace fs = std::filesystem;
  // cgroup v2: every ancestor's memory.max binds too.
  if (auto path = cgroup_path("")) {
    for (fs::path dir = fs::path("/sys/fs/cgroup") / fs::path(*path).relative_path();;
         dir = dir.parent_path()) {
      narrow(*m, number_in(dir / "memory.max"));
      if (dir == "/sys/fs/cgroup" || !dir.has_parent_path()) break;
    }
  }
  // cgroup v1: the memory controller's limit ("no limit" reads as a huge
  // number, which narrows nothing).
  if (auto path = cgroup_path("memory")) {
    const fs::path root = "/sys/fs/cgroup/memory";
    for (const fs::path& dir : {root / fs::path(*path).relative_path(), root}) {
      if (!fs::exists(dir / "memory.limit_in_bytes")) continue;
      narrow(*m, number_in(dir / "memory.limit_in_bytes"));
      break;
    }
  }
  return m;
}

}  // namespace kvtier::tiers
