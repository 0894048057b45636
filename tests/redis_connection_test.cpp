// A connection to a real redis-server the test starts: pipelined rounds on a
// Unix socket and on loopback TCP, binary values (up to several reads long,
// through a sink), AUTH, error replies that
// keep the connection in step, and a server that dies or stalls: an error
// within the deadline, never a hang, and the connection broken for good.
#include "tiers/redis_connection.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "redis_server.h"

namespace kvtier::tiers {
namespace {

using test_util::RedisServer;
using Command = RedisConnection::Command;
constexpr auto kTimeout = std::chrono::milliseconds(2000);

std::string binary_value(std::size_t n, int seed) {
  std::string v(n, '\0');
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return v;
}

// 64 SET NX then 64 GET of 64 KiB binary values (NULs, CR LF and all), each
// a round; then a second SET NX of every key, which must not overwrite.
void round_trip(RedisConnection& c) {
  std::vector<std::string> keys, values;
  for (int i = 0; i < 64; ++i) {
    keys.push_back("kvtier-test:" + std::to_string(i));
    values.push_back(binary_value(64 * 1024, i));
  }
  std::vector<Command> sets, gets, again;
  const std::string other = "other";
  for (int i = 0; i < 64; ++i) {
    sets.push_back({"SET", keys[i], values[i], "NX"});
    gets.push_back({"GET", keys[i]});
    again.push_back({"SET", keys[i], other, "NX"});
  }
  auto set = c.round(sets, kTimeout);
  ASSERT_TRUE(set.has_value()) << set.error();
  ASSERT_EQ(set->size(), 64u);
  for (const RedisReply& r : *set) EXPECT_EQ(r.str, "OK");
  auto not_again = c.round(again, kTimeout);
  ASSERT_TRUE(not_again.has_value()) << not_again.error();
  for (const RedisReply& r : *not_again)
    EXPECT_EQ(r.kind, RedisReply::Kind::kNil) << "NX overwrote";
  auto got = c.round(gets, kTimeout);
  ASSERT_TRUE(got.has_value()) << got.error();
  ASSERT_EQ(got->size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ((*got)[i].kind, RedisReply::Kind::kString);
    EXPECT_TRUE((*got)[i].str == values[i]) << "value " << i << " came back changed";
  }
}

TEST(RedisConnectionTest, PipelinedRoundsOnAUnixSocketAndOnLoopbackTcp) {
  SKIP_WITHOUT_REDIS();
  RedisServer server(/*tcp=*/true);
  ASSERT_TRUE(server.ready()) << server.log();
  for (const RedisAddress& address : {server.unix_address(), server.tcp_address()}) {
    SCOPED_TRACE(address.to_string());
    auto c = RedisConnection::connect(address, kTimeout);
    ASSERT_TRUE(c.has_value()) << c.error();
    const Command flush = {"FLUSHALL"};
    ASSERT_TRUE((*c)->round(std::span(&flush, 1), kTimeout).has_value());
    round_trip(**c);
    EXPECT_FALSE((*c)->broken());
  }
}

// Values of one byte to several reads' worth (the connection reads 1 MiB a
// system call), in one round: a sink offered the string replies sees each
// whole, once, under its command's index, and the replies it declines (and
// the ones that are not strings) arrive as usual.
TEST(RedisConnectionTest, ValuesLargerThanOneReadReachTheSinkWhole) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready()) << server.log();
  auto c = RedisConnection::connect(server.unix_address(), kTimeout);
  ASSERT_TRUE(c.has_value()) << c.error();
  const std::vector<std::size_t> sizes = {1, (1 << 20) - 1, (1 << 20) + 7, (3 << 20) + 5, 40};
  std::vector<std::string> keys, values;
  std::vector<Command> sets, gets;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back("big:" + std::to_string(i));
    values.push_back(binary_value(sizes[i], static_cast<int>(i)));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    sets.push_back({"SET", keys[i], values[i]});
    gets.push_back({"GET", keys[i]});
  }
  gets.push_back({"GET", "missing"});
  ASSERT_TRUE((*c)->round(sets, kTimeout).has_value());
  std::vector<std::string> seen(gets.size());
  std::vector<int> offers(gets.size(), 0);
  const ValueSink even = [&](std::size_t command, std::span<const std::byte> value) {
    ++offers.at(command);
    if (command % 2 != 0) return false;
    seen[command].assign(reinterpret_cast<const char*>(value.data()), value.size());
    return true;
  };
  auto got = (*c)->round(gets, kTimeout, even);
  ASSERT_TRUE(got.has_value()) << got.error();
  ASSERT_EQ(got->size(), gets.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("value " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " bytes");
    EXPECT_EQ(offers[i], 1);
    EXPECT_EQ((*got)[i].kind, RedisReply::Kind::kString);
    if (i % 2 == 0) {
      EXPECT_TRUE(seen[i] == values[i]) << "the sink saw it changed";
      EXPECT_TRUE((*got)[i].str.empty()) << "a value the sink took is not also copied";
    } else {
      EXPECT_TRUE((*got)[i].str == values[i]) << "came back changed";
    }
  }
  EXPECT_EQ(offers.back(), 0) << "a nil is not a string";
  EXPECT_EQ(got->back().kind, RedisReply::Kind::kNil);
  EXPECT_FALSE((*c)->broken());
}

TEST(RedisConnectionTest, ErrorRepliesKeepTheConnectionInStep) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready()) << server.log();
  auto c = RedisConnection::connect(server.unix_address(), kTimeout);
  ASSERT_TRUE(c.has_value()) << c.error();
  const std::vector<Command> round = {
      {"SET", "a", "1"}, {"NOSUCHCOMMAND"}, {"INCR", "a"}, {"GET", "missing"}};
  auto r = (*c)->round(round, kTimeout);
  ASSERT_TRUE(r.has_value()) << r.error();
  EXPECT_EQ((*r)[0].str, "OK");
  EXPECT_TRUE((*r)[1].is_error());
  EXPECT_NE((*r)[1].str.find("unknown command"), std::string::npos) << (*r)[1].str;
  EXPECT_EQ((*r)[2].kind, RedisReply::Kind::kInteger);
  EXPECT_EQ((*r)[2].integer, 2);
  EXPECT_EQ((*r)[3].kind, RedisReply::Kind::kNil);
  EXPECT_FALSE((*c)->broken());
}

TEST(RedisConnectionTest, ArraysNestAndHoldEveryKindOfReply) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready()) << server.log();
  auto c = RedisConnection::connect(server.unix_address(), kTimeout);
  ASSERT_TRUE(c.has_value()) << c.error();
  // What CLUSTER SLOTS answers is shaped so: arrays in arrays.
  const Command eval = {"EVAL", "return {1, {2, 'x', {}}, 'y', false, {err='E'}, {ok='S'}}", "0"};
  auto r = (*c)->round(std::span(&eval, 1), kTimeout);
  ASSERT_TRUE(r.has_value()) << r.error();
  const RedisReply& top = (*r)[0];
  ASSERT_EQ(top.kind, RedisReply::Kind::kArray);
  ASSERT_EQ(top.elements.size(), 6u);
  EXPECT_EQ(top.elements[0].integer, 1);
  const RedisReply& inner = top.elements[1];
  ASSERT_EQ(inner.kind, RedisReply::Kind::kArray);
  ASSERT_EQ(inner.elements.size(), 3u);
  EXPECT_EQ(inner.elements[0].integer, 2);
  EXPECT_EQ(inner.elements[1].str, "x");
  EXPECT_EQ(inner.elements[2].kind, RedisReply::Kind::kArray);
  EXPECT_TRUE(inner.elements[2].elements.empty());
  EXPECT_EQ(top.elements[2].str, "y");
  EXPECT_EQ(top.elements[3].kind, RedisReply::Kind::kNil);  // Lua's false
  EXPECT_TRUE(top.elements[4].is_error());
  EXPECT_EQ(top.elements[4].str, "E");
  EXPECT_EQ(top.elements[5].kind, RedisReply::Kind::kStatus);
  EXPECT_EQ(top.elements[5].str, "S");
}

TEST(RedisConnectionTest, APasswordIsSentAndAWrongOneIsRefused) {
  SKIP_WITHOUT_REDIS();
  RedisServer server(/*tcp=*/false, "a fleet's password");
  ASSERT_TRUE(server.ready()) << server.log();
  auto good = RedisConnection::connect(server.unix_address(), kTimeout, "a fleet's password");
  ASSERT_TRUE(good.has_value()) << good.error();
  const Command ping = {"PING"};
  auto pong = (*good)->round(std::span(&ping, 1), kTimeout);
  ASSERT_TRUE(pong.has_value());
  EXPECT_EQ((*pong)[0].str, "PONG");
  auto bad = RedisConnection::connect(server.unix_address(), kTimeout, "wrong");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().find("AUTH"), std::string::npos) << bad.error();
  // Without a password every command is refused, as a reply.
  auto none = RedisConnection::connect(server.unix_address(), kTimeout);
  ASSERT_TRUE(none.has_value());
  auto refused = (*none)->round(std::span(&ping, 1), kTimeout);
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE((*refused)[0].str.find("NOAUTH"), std::string::npos) << (*refused)[0].str;
}

TEST(RedisConnectionTest, NoServerIsAClearError) {
  SKIP_WITHOUT_REDIS();
  test_util::TempDir dir;
  const RedisAddress nowhere = RedisAddress::unix_socket((dir.path() / "none.sock").string());
  auto c = RedisConnection::connect(nowhere, kTimeout);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().find(nowhere.unix_path), std::string::npos) << c.error();
}

// A stalled server (SIGSTOP: as a hung or partitioned node) fails the round
// at its deadline instead of holding the thread; a killed one fails it at
// once. Either way the connection stays broken.
TEST(RedisConnectionTest, AStalledOrKilledServerFailsTheRoundAndBreaksTheConnection) {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  ASSERT_TRUE(server.ready()) << server.log();
  const Command ping = {"PING"};
  {
    auto c = RedisConnection::connect(server.unix_address(), kTimeout);
    ASSERT_TRUE(c.has_value()) << c.error();
    ::kill(server.pid(), SIGSTOP);
    auto r = (*c)->round(std::span(&ping, 1), std::chrono::milliseconds(200));
    ::kill(server.pid(), SIGCONT);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find("deadline"), std::string::npos) << r.error();
    EXPECT_TRUE((*c)->broken());
    // The server is back, but this connection's replies would be out of step.
    EXPECT_FALSE((*c)->round(std::span(&ping, 1), kTimeout).has_value());
  }
  auto c = RedisConnection::connect(server.unix_address(), kTimeout);
  ASSERT_TRUE(c.has_value()) << c.error();
  server.stop();
  auto r = (*c)->round(std::span(&ping, 1), kTimeout);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE((*c)->broken());
}

}  // namespace
}  // namespace kvtier::tiers
