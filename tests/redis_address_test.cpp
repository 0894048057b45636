// The `remote` setting's addresses: every form a Redis user writes, and the
// ones refused, with the reason.
#include "tiers/redis_address.h"

#include <gtest/gtest.h>

namespace kvtier::tiers {
namespace {

RedisAddress tcp(std::string host, int port) { return RedisAddress::tcp(std::move(host), port); }

TEST(RedisAddressTest, ReadsEveryForm) {
  const std::vector<std::pair<std::string, RedisAddress>> cases = {
      {"redis://10.0.0.5:7000", tcp("10.0.0.5", 7000)},
      {"redis://cache.internal", tcp("cache.internal", 6379)},
      {"redis://cache.internal:6380/0", tcp("cache.internal", 6380)},
      {"localhost:6379", tcp("localhost", 6379)},
      {"localhost", tcp("localhost", 6379)},
      {"[::1]:7001", tcp("::1", 7001)},
      {"redis://[fe80::1]", tcp("fe80::1", 6379)},
      {"unix:///run/redis/redis.sock", RedisAddress::unix_socket("/run/redis/redis.sock")},
      {"/tmp/r.sock", RedisAddress::unix_socket("/tmp/r.sock")},
  };
  for (const auto& [text, want] : cases) {
    const auto got = parse_redis_addresses(text);
    ASSERT_TRUE(got.has_value()) << text << ": " << got.error();
    ASSERT_EQ(got->size(), 1u) << text;
    EXPECT_EQ((*got)[0], want) << text;
  }
}

TEST(RedisAddressTest, AListIsTheClustersSeeds) {
  const auto got = parse_redis_addresses("10.0.0.1:7000, 10.0.0.2:7000 ,redis://10.0.0.3:7000");
  ASSERT_TRUE(got.has_value()) << got.error();
  EXPECT_EQ(*got, (std::vector<RedisAddress>{tcp("10.0.0.1", 7000), tcp("10.0.0.2", 7000),
                                             tcp("10.0.0.3", 7000)}));
  EXPECT_EQ((*got)[0].to_string(), "10.0.0.1:7000");
  EXPECT_EQ(tcp("::1", 7001).to_string(), "[::1]:7001");
}

TEST(RedisAddressTest, RefusesWhatItCannotServeWithTheReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty address"},
      {"a:7000,,b:7000", "empty address"},
      {"redis://user:secret@host:6379", "no credentials"},
      {"rediss://host:6380", "TLS"},
      {"redis://host:6379/2", "only database 0"},
      {"host:0", "not 1 to 65535"},
      {"host:65536", "not 1 to 65535"},
      {"host:63x", "not 1 to 65535"},
      {"host:", "not 1 to 65535"},
      {"::1:7000", "[ADDRESS]:PORT"},
      {"[::1", "unclosed"},
      {"redis://:6379", "no host"},
      {"redis://host?timeout=1", "query"},
      {"unix://run/redis.sock", "absolute"},
  };
  for (const auto& [text, reason] : cases) {
    const auto got = parse_redis_addresses(text);
    ASSERT_FALSE(got.has_value()) << "\"" << text << "\" was accepted";
    EXPECT_NE(got.error().find(reason), std::string::npos) << text << ": " << got.error();
  }
}

}  // namespace
}  // namespace kvtier::tiers
