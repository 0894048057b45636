#include "tiers/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace kvtier::tiers {
namespace {

TEST(HostMemoryTest, IsWhatTheMachineHasAtMost) {
  const auto memory = host_memory();
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(memory->available, 0u);
  EXPECT_LE(memory->available, memory->total);
  // Never more than the machine's own MemTotal, whatever a cgroup says.
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  ASSERT_TRUE(in >> name >> kib);
  ASSERT_EQ(name, "MemTotal:");
  EXPECT_LE(memory->total, kib * 1024);
}

}  // namespace
}  // namespace kvtier::tiers
