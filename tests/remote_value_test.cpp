// The remote tier's values: what is written is read back, and everything
// else (a byte changed anywhere, another key, model, length or secret, a
// value forged without the secret) is refused with its reason.
#include "tiers/remote_value.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kvtier::tiers {
namespace {

using enum RemoteValueError;

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return v;
}

RemoteSecret secret(int seed) { return RemoteSecret::from_bytes(bytes(32, seed)).value(); }

const BlockKey kKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
constexpr std::uint64_t kTag = 0x6b767469657221ULL;

class RemoteValueTest : public ::testing::TestWithParam<bool> {
 protected:
  // With the fleet's secret (the parameter) or without.
  RemoteValueSpec spec() const {
    return {.format_tag = kTag,
            .payload_bytes = payload_.size(),
            .secret = GetParam() ? &secret_ : nullptr};
  }
  std::vector<std::byte> encode() const {
    return encode_remote_value(kKey, spec(), meta_, payload_);
  }

  const RemoteSecret secret_ = secret(1);
  const std::vector<std::byte> meta_ = bytes(40, 2), payload_ = bytes(256, 3);
};

TEST_P(RemoteValueTest, WhatIsWrittenIsReadBack) {
  const std::vector<std::byte> value = encode();
  ASSERT_EQ(value.size(), kRemoteHeaderBytes + (GetParam() ? RemoteSecret::kMacBytes : 0) +
                              meta_.size() + payload_.size());
  const auto got = decode_remote_value(kKey, spec(), value);
  ASSERT_TRUE(got.has_value()) << to_string(got.error());
  EXPECT_TRUE(std::ranges::equal(got->meta, meta_));
  EXPECT_TRUE(std::ranges::equal(got->payload, payload_));
}

TEST_P(RemoteValueTest, AByteChangedAnywhereIsRefused) {
  const std::vector<std::byte> value = encode();
  for (std::size_t i = 0; i < value.size(); ++i) {
    std::vector<std::byte> changed = value;
    changed[i] ^= std::byte{0x10};
    EXPECT_FALSE(decode_remote_value(kKey, spec(), changed).has_value()) << "byte " << i;
  }
}

TEST_P(RemoteValueTest, AnotherKeyModelOrLengthIsRefusedWithItsReason) {
  const std::vector<std::byte> value = encode();
  const auto error = [&](const BlockKey& key, const RemoteValueSpec& s,
                         std::span<const std::byte> v) {
    const auto got = decode_remote_value(key, s, v);
    return got ? std::string("accepted") : std::string(to_string(got.error()));
  };
  // A value copied under another key (another prefix, salt or namespace).
  EXPECT_EQ(error({kKey.hi, kKey.lo + 1}, spec(), value), to_string(kChecksum));
  RemoteValueSpec other = spec();
  other.format_tag = kTag + 1;
  EXPECT_EQ(error(kKey, other, value), to_string(kFormat));
  other = spec();
  other.payload_bytes = payload_.size() / 2;
  EXPECT_EQ(error(kKey, other, value), to_string(kLength));
  EXPECT_EQ(error(kKey, spec(), std::span(value).first(value.size() - 1)), to_string(kTruncated));
  EXPECT_EQ(error(kKey, spec(), std::span(value).first(10)), to_string(kTruncated));
  std::vector<std::byte> longer = value;
  longer.push_back(std::byte{0});
  EXPECT_EQ(error(kKey, spec(), longer), to_string(kLength));
  std::vector<std::byte> foreign = value;
  foreign[0] = std::byte{'X'};
  EXPECT_EQ(error(kKey, spec(), foreign), to_string(kMagic));
  EXPECT_EQ(error(kKey, spec(), {}), to_string(kTruncated));
}

TEST_P(RemoteValueTest, APeekAtTheFirstBytesFindsTheMetadata) {
  const std::vector<std::byte> value = encode();
  const std::span<const std::byte> prefix =
      std::span(value).first(std::min(value.size(), kRemotePeekBytes));
  const auto meta = peek_remote_meta(spec(), prefix);
  ASSERT_TRUE(meta.has_value()) << to_string(meta.error());
  EXPECT_TRUE(std::ranges::equal(*meta, meta_));
  // Too short to hold the metadata; another model; not a value at all.
  EXPECT_EQ(peek_remote_meta(spec(), prefix.first(kRemoteHeaderBytes + 8)).error(), kTruncated);
  RemoteValueSpec other = spec();
  other.format_tag ^= 1;
  EXPECT_EQ(peek_remote_meta(other, prefix).error(), kFormat);
  const std::vector<std::byte> junk = bytes(64, 9);
  EXPECT_EQ(peek_remote_meta(spec(), junk).error(), kMagic);
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutSecret, RemoteValueTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Secret" : "NoSecret"; });

// A writer without the fleet's secret can make a value whose every other
// field and checksum are right (here: under its own secret), and a fleet
// member must still never serve it.
TEST(RemoteValueSecretTest, OnlyValuesMadeWithTheFleetsSecretAreServed) {
  const RemoteSecret fleet = secret(1), intruder = secret(9);
  const std::vector<std::byte> meta = bytes(8, 4), payload = bytes(64, 5);
  const RemoteValueSpec with_fleet{.format_tag = kTag, .payload_bytes = 64, .secret = &fleet};
  const RemoteValueSpec with_intruder{.format_tag = kTag, .payload_bytes = 64, .secret = &intruder};
  const RemoteValueSpec without{.format_tag = kTag, .payload_bytes = 64};
  const auto forged = encode_remote_value(kKey, with_intruder, meta, payload);
  EXPECT_EQ(decode_remote_value(kKey, with_fleet, forged).error(), kUnauthenticated);
  const auto unsigned_value = encode_remote_value(kKey, without, meta, payload);
  EXPECT_EQ(decode_remote_value(kKey, with_fleet, unsigned_value).error(), kUnauthenticated);
  // And a daemon without the secret cannot check a signed value: refused.
  const auto signed_value = encode_remote_value(kKey, with_fleet, meta, payload);
  EXPECT_EQ(decode_remote_value(kKey, without, signed_value).error(), kUnauthenticated);
  EXPECT_TRUE(decode_remote_value(kKey, with_fleet, signed_value).has_value());
}

}  // namespace
}  // namespace kvtier::tiers
