// tiers/block_key.cpp: the hex form blocks travel in between processes.
#include "tiers/block_key.h"

#include <gtest/gtest.h>

namespace kvtier::tiers {
namespace {

TEST(BlockKeyTest, HexRoundTripsAndAnythingElseIsRefused) {
  const BlockKey key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  const std::string hex = to_hex(key);
  EXPECT_EQ(hex, "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(block_key_from_hex(hex), key);
  EXPECT_EQ(block_key_from_hex("0123456789ABCDEFFEDCBA9876543210"), key);
  EXPECT_EQ(block_key_from_hex(""), std::nullopt);
  EXPECT_EQ(block_key_from_hex(hex.substr(1)), std::nullopt);
  EXPECT_EQ(block_key_from_hex(hex + "0"), std::nullopt);
  EXPECT_EQ(block_key_from_hex("0123456789abcdeffedcba987654321g"), std::nullopt);
  EXPECT_EQ(block_key_from_hex(" 123456789abcdeffedcba9876543210"), std::nullopt);
}

}  // namespace
}  // namespace kvtier::tiers
