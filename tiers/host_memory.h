// How much host memory this process can have: what the machine has
// (/proc/meminfo), narrowed by the memory limit of the process's control
// group where one is set (systemd's MemoryMax=, a container's limit), since
// past it the kernel kills the process however much the machine has free.
//
// Pools are sized from it before they are made: a size the machine cannot
// hold is refused with a message, where allocating it would throw, be
// killed by the OOM killer when first touched, or, pinned, push everything
// else out of memory.
//
// Thread-safety: host_memory() reads files and keeps no state.
#pragma once

#include <cstdint>
#include <optional>

namespace kvtier::tiers {

struct HostMemory {
  std::uint64_t total = 0;      // MemTotal, or the cgroup's limit if lower
  std::uint64_t available = 0;  // MemAvailable, or the cgroup's limit if lower
};

// nullopt when /proc/meminfo cannot be read (then nothing can be checked).
std::optional<HostMemory> host_memory();

}  // namespace kvtier::tiers
