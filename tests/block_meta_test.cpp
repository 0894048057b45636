// The engine's metadata beside a stored block, and that L3 entries written
// before the metadata was opaque (index values of the first format) read
// back as exactly these bytes, so a store from before keeps serving.
#include "engine/cache/block_meta.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tiers/l3_index.h"

namespace kvtier {
namespace {

void put(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

TEST(BlockMetaTest, HoldsTheParentTheFingerprintAndTheTokens) {
  const std::vector<int> tokens = {5, -1, 50256};
  const auto meta = encode_block_meta({0x1111, 0x2222}, 0xF00D, tokens);
  ASSERT_EQ(meta.size(), 28u + 4 * tokens.size());
  EXPECT_EQ(meta[0], std::byte{0x11});
  EXPECT_EQ(meta[16], std::byte{0x0D});  // the fingerprint, little-endian
  EXPECT_EQ(meta[24], std::byte{3});     // the token count
  EXPECT_EQ(meta[28], std::byte{5});
  EXPECT_EQ(meta[32], std::byte{0xFF});  // -1 as u32
  // Each field counts: any other parent, model or token is other metadata.
  EXPECT_NE(meta, encode_block_meta({0x1111, 0x2223}, 0xF00D, tokens));
  EXPECT_NE(meta, encode_block_meta({0x1111, 0x2222}, 0xF00E, tokens));
  EXPECT_NE(meta, encode_block_meta({0x1111, 0x2222}, 0xF00D, std::vector<int>{5, -1, 50257}));
}

TEST(BlockMetaTest, AnIndexEntryOfTheFirstFormatReadsBackAsTheSameMetadata) {
  // A value as the first format wrote it: version 1, offset, length,
  // checksum, parent, fingerprint, last use, token count, tokens.
  const tiers::BlockKey parent{0xAAAA, 0xBBBB};
  const std::vector<int> tokens = {7, 8, 9, 10};
  std::string v1(1, '\x01');
  put(v1, 8192, 8);
  put(v1, 5000, 4);
  put(v1, 0xC0FFEE, 8);
  put(v1, parent.hi, 8);
  put(v1, parent.lo, 8);
  put(v1, 0xF00D, 8);
  put(v1, 42, 8);
  put(v1, tokens.size(), 4);
  for (int t : tokens) put(v1, static_cast<std::uint32_t>(t), 4);

  const tiers::BlockKey key{1, 2};
  const auto e = tiers::L3Index::decode_value(key, v1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->record.key, key);
  EXPECT_EQ(e->offset, 8192u);
  EXPECT_EQ(e->length, 5000u);
  EXPECT_EQ(e->checksum, 0xC0FFEEu);
  EXPECT_EQ(e->last_use, 42u);
  EXPECT_EQ(e->record.meta, encode_block_meta(parent, 0xF00D, tokens));
  // Written again, it is the current format, and reads back the same.
  const std::string current = tiers::L3Index::encode_value(*e);
  EXPECT_EQ(current[0], '\x03');
  EXPECT_EQ(tiers::L3Index::decode_value(key, current), e);
  // A first-format value cut short or with a trailing byte is refused.
  for (std::size_t n = 0; n < v1.size(); ++n)
    EXPECT_FALSE(tiers::L3Index::decode_value(key, v1.substr(0, n))) << "cut to " << n;
  EXPECT_FALSE(tiers::L3Index::decode_value(key, v1 + "x"));
}

}  // namespace
}  // namespace kvtier
