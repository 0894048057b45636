// Hash slots, slot maps and redirections as the Redis Cluster specification
// gives them (the slot of each key is also checked against a real server's
// CLUSTER KEYSLOT in redis_cluster_test.cpp); replies that are not what it
// says are errors, never slots or ports out of range.
#include "tiers/redis_slots.h"

#include <gtest/gtest.h>

namespace kvtier::tiers {
namespace {

RedisReply integer(long long v) {
  RedisReply r;
  r.kind = RedisReply::Kind::kInteger;
  r.integer = v;
  return r;
}
RedisReply string(std::string s, RedisReply::Kind kind = RedisReply::Kind::kString) {
  RedisReply r;
  r.kind = kind;
  r.str = std::move(s);
  return r;
}
RedisReply array(std::vector<RedisReply> elements) {
  RedisReply r;
  r.kind = RedisReply::Kind::kArray;
  r.elements = std::move(elements);
  return r;
}
RedisReply range(long long first, long long last, std::string host, long long port) {
  return array({integer(first), integer(last),
                array({string(std::move(host)), integer(port), string("id")})});
}

TEST(RedisKeySlotTest, MatchesTheSpecification) {
  // The specification's CRC16 check value, and its examples.
  EXPECT_EQ(redis_key_slot("123456789"), 0x31C3);
  EXPECT_EQ(redis_key_slot("foo"), 12182);
  EXPECT_EQ(redis_key_slot(""), 0);
  // A {hash tag}: only what is inside counts, unless it is empty.
  EXPECT_EQ(redis_key_slot("{user1000}.following"), redis_key_slot("user1000"));
  EXPECT_NE(redis_key_slot("foo{}{bar}"), redis_key_slot("bar"));
  EXPECT_EQ(redis_key_slot("foo{{bar}}zap"), redis_key_slot("{bar"));
  EXPECT_EQ(redis_key_slot("foo{bar}{zap}"), redis_key_slot("bar"));
}

TEST(ParseClusterSlotsTest, ReadsMastersAndFillsTheirHosts) {
  const RedisAddress asked = RedisAddress::tcp("10.0.0.9", 7000);
  const RedisReply reply = array({range(0, 5460, "10.0.0.1", 7000), range(5461, 10922, "", 7001),
                                  range(10923, 16383, "?", 7002)});
  const auto ranges = parse_cluster_slots(reply, asked);
  ASSERT_TRUE(ranges.has_value()) << ranges.error();
  ASSERT_EQ(ranges->size(), 2u);  // the unknown endpoint serves nothing
  EXPECT_EQ((*ranges)[0], (SlotRange{0, 5460, RedisAddress::tcp("10.0.0.1", 7000)}));
  EXPECT_EQ((*ranges)[1], (SlotRange{5461, 10922, RedisAddress::tcp("10.0.0.9", 7001)}));
  EXPECT_TRUE(parse_cluster_slots(array({}), asked)->empty());
}

TEST(ParseClusterSlotsTest, RefusesWhatIsNotASlotMap) {
  const RedisAddress asked = RedisAddress::tcp("10.0.0.9", 7000);
  const std::vector<RedisReply> bad = {
      string("ERR This instance has cluster support disabled", RedisReply::Kind::kError),
      string("not an array"),
      array({integer(1)}),
      array({range(-1, 5, "h", 7000)}),
      array({range(0, 16384, "h", 7000)}),
      array({range(9, 5, "h", 7000)}),
      array({range(0, 5, "h", 0)}),
      array({range(0, 5, "h", 65536)}),
      array({array({integer(0), integer(5), array({integer(1), integer(7000)})})}),
      array({array({integer(0), integer(5), string("h")})}),
  };
  for (const RedisReply& reply : bad) {
    const auto ranges = parse_cluster_slots(reply, asked);
    ASSERT_FALSE(ranges.has_value());
    EXPECT_NE(ranges.error().find("10.0.0.9:7000"), std::string::npos) << ranges.error();
  }
}

TEST(ParseRedirectTest, ReadsMovedAndAsk) {
  const RedisAddress from = RedisAddress::tcp("10.0.0.9", 7000);
  const auto moved =
      parse_redirect(string("MOVED 3999 127.0.0.1:6381", RedisReply::Kind::kError), from);
  ASSERT_TRUE(moved.has_value());
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to, RedisAddress::tcp("127.0.0.1", 6381));
  const auto ask = parse_redirect(string("ASK 1 ::1:6380", RedisReply::Kind::kError), from);
  ASSERT_TRUE(ask.has_value());
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->to, RedisAddress::tcp("::1", 6380));
  const auto here = parse_redirect(string("MOVED 7 :7001", RedisReply::Kind::kError), from);
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(here->to, RedisAddress::tcp("10.0.0.9", 7001));
}

TEST(ParseRedirectTest, AnythingElseIsNoRedirect) {
  const RedisAddress from = RedisAddress::tcp("10.0.0.9", 7000);
  for (const char* text :
       {"ERR unknown command", "MOVED", "MOVED 3999", "MOVED x 1.2.3.4:5", "MOVED 16384 1.2.3.4:5",
        "MOVED 1 1.2.3.4", "MOVED 1 1.2.3.4:0", "MOVED 1 1.2.3.4:70000", "ASK 1 ?:7000",
        "CLUSTERDOWN Hash slot not served"})
    EXPECT_FALSE(parse_redirect(string(text, RedisReply::Kind::kError), from).has_value()) << text;
  // Only error replies redirect.
  EXPECT_FALSE(parse_redirect(string("MOVED 1 1.2.3.4:5"), from).has_value());
  // An empty host means the asked one's, which a Unix socket has not.
  EXPECT_FALSE(parse_redirect(string("MOVED 7 :7001", RedisReply::Kind::kError),
                              RedisAddress::unix_socket("/run/redis.sock"))
                   .has_value());
}

}  // namespace
}  // namespace kvtier::tiers
