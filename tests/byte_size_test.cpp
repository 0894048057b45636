#include "util/byte_size.h"

#include <gtest/gtest.h>

namespace kvtier::util {
namespace {

TEST(ByteSizeTest, ReadsInPowersOf1024) {
  EXPECT_EQ(bytes_text(0), "0 bytes");
  EXPECT_EQ(bytes_text(1023), "1023 bytes");
  EXPECT_EQ(bytes_text(1024), "1.0 KiB");
  EXPECT_EQ(bytes_text(std::uint64_t{3} << 19), "1.5 MiB");
  EXPECT_EQ(bytes_text(std::uint64_t{1} << 40), "1.0 TiB");
  EXPECT_EQ(bytes_text(~std::uint64_t{0}), "16.0 EiB");
}

}  // namespace
}  // namespace kvtier::util
