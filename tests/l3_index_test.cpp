// L3Index against a real RocksDB in a temporary directory: entries survive a
// reopen, another format discards them, and damaged values are dropped with
// a warning instead of being trusted.
#include "tiers/l3_index.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace kvtier::tiers {
namespace {

using test_util::contains;
using test_util::TempDir;

L3Entry entry(std::uint64_t i) {
  L3Entry e;
  e.record.key = {i * 0x9E3779B97F4A7C15ull, i + 1};
  e.record.parent = {i, i * 3};
  e.record.fingerprint = 0xF00D;
  e.record.tokens = {static_cast<std::int32_t>(i), -1, 50256, 7};
  e.offset = i * 8192;
  e.length = 5000;
  e.checksum = 0xC0FFEE ^ i;
  e.last_use = 10 + i;
  return e;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(L3Index, ValueEncodingRoundTripsAndRejectsDamage) {
  const L3Entry e = entry(42);
  const std::string v = L3Index::encode_value(e);
  EXPECT_EQ(v.size(), 57u + 4 * e.record.tokens.size());
  const auto back = L3Index::decode_value(e.record.key, v);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, e);

  EXPECT_FALSE(L3Index::decode_value(e.record.key, ""));
  // Cut anywhere. (The checksum's low half is zero so that a cut inside it
  // leaves what could pass for an empty token list.)
  L3Entry zeros = e;
  zeros.checksum = 0x1234567800000000ull;
  const std::string z = L3Index::encode_value(zeros);
  for (std::size_t n = 0; n < z.size(); ++n)
    EXPECT_FALSE(L3Index::decode_value(e.record.key, z.substr(0, n))) << "cut to " << n << " bytes";
  EXPECT_FALSE(L3Index::decode_value(e.record.key, v + "x")) << "trailing byte";
  std::string other_version = v;
  other_version[0] = 2;
  EXPECT_FALSE(L3Index::decode_value(e.record.key, other_version));
  std::string huge_count = v;
  huge_count[53] = '\xFF';  // token count's low byte
  huge_count[56] = '\x7F';  // and high byte: ~2^31 tokens announced in a short value
  EXPECT_FALSE(L3Index::decode_value(e.record.key, huge_count));

  const BlockKey k{0x0102030405060708ull, 0x1112131415161718ull};
  EXPECT_EQ(L3Index::decode_key(L3Index::encode_key(k)), k);
  EXPECT_FALSE(L3Index::decode_key("k123"));
  // Big-endian keys sort like the numbers.
  EXPECT_LT(L3Index::encode_key({1, 0xFF}), L3Index::encode_key({2, 0}));
}

TEST(L3Index, EntriesSurviveReopen) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    std::vector<L3Entry> batch = {entry(1), entry(2), entry(3)};
    ASSERT_TRUE(opened->index->put(batch));
    ASSERT_TRUE(opened->index->erase(entry(2).record.key));
    ASSERT_TRUE(opened->index->erase(BlockKey{99, 99})) << "a missing key is not an error";
    L3Entry moved = entry(3);
    moved.last_use = 1000;
    ASSERT_TRUE(opened->index->put(moved));
  }
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->warnings.empty()) << joined(opened->warnings);
  ASSERT_EQ(opened->entries.size(), 2u);
  std::map<BlockKey, L3Entry> by_key;
  for (const auto& e : opened->entries) by_key[e.record.key] = e;
  EXPECT_EQ(by_key.at(entry(1).record.key), entry(1));
  EXPECT_EQ(by_key.at(entry(3).record.key).last_use, 1000u);
}

TEST(L3Index, AnotherFormatOrBlockSizeDiscardsEntries) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    ASSERT_TRUE(opened->index->put(entry(1)));
  }
  {
    auto opened = L3Index::open(path, 8, 5000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    EXPECT_TRUE(contains(joined(opened->warnings), "format_tag 7")) << joined(opened->warnings);
    ASSERT_TRUE(opened->index->put(entry(2)));
  }
  {
    auto opened = L3Index::open(path, 8, 6000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    EXPECT_TRUE(contains(joined(opened->warnings), "block_bytes 5000"));
  }
  // The new format stuck: reopening with it finds nothing to complain about.
  auto opened = L3Index::open(path, 8, 6000);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->warnings.empty()) << joined(opened->warnings);
}

TEST(L3Index, DamagedValuesAreDroppedWithAWarning) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    ASSERT_TRUE(opened->index->put(entry(1)));
  }
  {
    // Damage behind the index's back, through RocksDB itself.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    ASSERT_TRUE(rocksdb::DB::Open(options, path, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const std::string good = L3Index::encode_value(entry(2));
    ASSERT_TRUE(db->Put({}, L3Index::encode_key(entry(2).record.key), good.substr(0, 20)).ok());
    ASSERT_TRUE(db->Put({}, L3Index::encode_key(entry(3).record.key), "\x09garbage").ok());
  }
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  ASSERT_EQ(opened->entries.size(), 1u);
  EXPECT_EQ(opened->entries[0], entry(1));
  EXPECT_TRUE(contains(joined(opened->warnings), "dropped 2 undecodable"))
      << joined(opened->warnings);
  opened->index.reset();
  auto again = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(again) << again.error();
  EXPECT_TRUE(again->warnings.empty())
      << "dropped entries were deleted: " << joined(again->warnings);
}

TEST(L3Index, UnopenablePathIsAnError) {
  TempDir dir;
  const auto file = dir.write("plain", "x");
  auto opened = L3Index::open((file / "index").string(), 7, 5000);
  ASSERT_FALSE(opened);
  EXPECT_TRUE(contains(opened.error(), "index"));
}

}  // namespace
}  // namespace kvtier::tiers
