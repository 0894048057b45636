#include "tiers/disk_space.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kvtier::tiers {
namespace {

TEST(DiskSpaceTest, APathNotMadeYetIsAskedAboutItsNearestParent) {
  test_util::TempDir dir;
  const auto here = disk_space(dir.path().string());
  ASSERT_TRUE(here.has_value()) << here.error();
  EXPECT_GT(here->total, 0u);
  EXPECT_LE(here->free, here->total);
  const auto deeper = disk_space((dir.path() / "not" / "yet").string());
  ASSERT_TRUE(deeper.has_value()) << deeper.error();
  EXPECT_EQ(deeper->total, here->total);
}

TEST(DiskSpaceTest, AnUnreachablePathIsAnError) {
  test_util::TempDir dir;
  const auto file = dir.write("file", "x");
  auto under_a_file = disk_space((file / "below").string());
  ASSERT_FALSE(under_a_file.has_value());
  EXPECT_TRUE(test_util::contains(under_a_file.error(), "statvfs"));
}

}  // namespace
}  // namespace kvtier::tiers
