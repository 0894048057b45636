// The remote tier against a real redis-server the test starts: blocks
// written by one store are found (one round of lookups) and read by another,
// as by another daemon; values that fail their checks are misses, counted,
// and deleted when corrupt; another namespace, format or secret never hits;
// a server that dies costs hits, and the store comes back by itself when
// it returns.
#include "tiers/redis_store.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "redis_server.h"
#include "redis_store_test_util.h"

namespace kvtier::tiers {
namespace {

using test_util::RedisServer;
using Command = RedisConnection::Command;
using namespace std::chrono_literals;

constexpr std::size_t kBlockBytes = 4096 + 8;  // not a page multiple: nothing assumes one
constexpr std::uint64_t kTag = 0x6b767469657221ULL;

std::vector<std::byte> block(int seed) {
  std::vector<std::byte> v(kBlockBytes);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 7 + seed) & 0xff);
  return v;
}

BlockRecord record(int i) {
  return {BlockKey{0x1000u + static_cast<std::uint64_t>(i), 0x2000u},
          {std::byte{1}, static_cast<std::byte>(i)}};
}

std::shared_ptr<const RemoteSecret> secret(int seed) {
  std::vector<std::byte> bytes(32, static_cast<std::byte>(seed));
  return std::make_shared<const RemoteSecret>(RemoteSecret::from_bytes(bytes).value());
}

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS();
    ASSERT_TRUE(server_.ready()) << server_.log();
  }

  RedisStoreOptions options() const {
    return test_util::redis_store_options({server_.unix_address()}, kBlockBytes, kTag);
  }
  static std::unique_ptr<RedisStore> open(const RedisStoreOptions& o) {
    return test_util::open_redis_store(o);
  }
  static std::vector<StoreStatus> finish(RedisStore& store,
                                         const std::vector<std::uint64_t>& tickets) {
    return test_util::finish(store, tickets);
  }
  static StoreStatus write(RedisStore& store, const BlockRecord& r,
                           const std::vector<std::byte>& b) {
    return finish(store, {store.write(r, b.data())})[0];
  }
  static StoreStatus read(RedisStore& store, const BlockRecord& r, std::vector<std::byte>& out) {
    out.assign(kBlockBytes, std::byte{0});
    return finish(store, {store.read(r.key, r.meta, out.data())})[0];
  }
  // Asks until the answers are in, as the engine does step after step.
  static void learn(RedisStore& store, std::span<const BlockKey> keys) {
    for (int i = 0; i < 1000 && !store.knows(keys); ++i) store.drain();
    ASSERT_TRUE(store.knows(keys));
  }
  // A command on the server, as an operator (or an attacker) would send it.
  RedisReply command(const Command& c) const { return server_.command(c); }

  RedisServer server_;
};

TEST_F(RedisStoreTest, AnotherStoreFindsAndReadsWhatOneWrote) {
  auto writer = open(options());
  auto reader = open(options());
  ASSERT_TRUE(writer && reader);
  std::vector<BlockKey> keys;
  std::vector<std::uint64_t> tickets;
  std::vector<std::vector<std::byte>> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(block(i));
  for (int i = 0; i < 8; ++i) {
    tickets.push_back(writer->write(record(i), blocks[i].data()));
    keys.push_back(record(i).key);
  }
  for (StoreStatus s : finish(*writer, tickets)) EXPECT_EQ(s, StoreStatus::kOk);
  EXPECT_EQ(writer->stats().writes, 8);
  // Written once: a second write of a key there already sends nothing.
  EXPECT_EQ(write(*writer, record(0), blocks[0]), StoreStatus::kOk);
  EXPECT_EQ(writer->stats().writes, 8);

  // The reader knows nothing until it asks; one more key is not there.
  keys.push_back(record(99).key);
  EXPECT_FALSE(reader->lookup(keys[0]).has_value());
  EXPECT_FALSE(reader->knows(keys));
  learn(*reader, keys);
  for (int i = 0; i < 8; ++i) {
    const auto found = reader->lookup(keys[i]);
    ASSERT_TRUE(found.has_value()) << i;
    EXPECT_EQ(*found, record(i));
  }
  EXPECT_FALSE(reader->contains(record(99).key));
  std::vector<std::byte> got;
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(read(*reader, record(i), got), StoreStatus::kOk) << i;
    EXPECT_EQ(got, blocks[i]) << i;
  }
  const StoreStats s = reader->stats();
  EXPECT_EQ(s.reads, 8);
  EXPECT_EQ(s.read_bytes, 8 * static_cast<long>(kBlockBytes));
  EXPECT_EQ(s.used_blocks, 8u);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_TRUE(s.nodes[0].available);
  // Another daemon's key in the value's place is another daemon's business:
  // the key is the one the spec promises.
  EXPECT_EQ(command({"EXISTS", redis_key("test", kTag, record(3).key)}).integer, 1);
}

TEST_F(RedisStoreTest, AnotherNamespaceFormatOrSecretNeverHits) {
  auto writer = open(options());
  ASSERT_TRUE(writer);
  const std::vector<std::byte> b = block(1);
  ASSERT_EQ(write(*writer, record(1), b), StoreStatus::kOk);
  const std::vector<BlockKey> keys = {record(1).key};

  RedisStoreOptions other_namespace = options();
  other_namespace.key_namespace = "other";
  RedisStoreOptions other_format = options();
  other_format.format_tag ^= 1;
  for (const RedisStoreOptions& o : {other_namespace, other_format}) {
    auto store = open(o);
    ASSERT_TRUE(store);
    learn(*store, keys);
    EXPECT_FALSE(store->contains(keys[0]));
    std::vector<std::byte> got;
    EXPECT_EQ(read(*store, record(1), got), StoreStatus::kNotFound);
  }

  // A fleet with a secret and a writer without it: neither serves the
  // other's values, and neither deletes them (they may be good for others).
  RedisStoreOptions keyed = options();
  keyed.secret = secret(1);
  auto with_secret = open(keyed);
  ASSERT_TRUE(with_secret);
  learn(*with_secret, keys);
  EXPECT_FALSE(with_secret->contains(keys[0]));
  std::vector<std::byte> got;
  EXPECT_EQ(read(*with_secret, record(1), got), StoreStatus::kChecksumMismatch);
  EXPECT_EQ(with_secret->stats().checksum_failures, 1);
  ASSERT_EQ(write(*with_secret, record(2), b), StoreStatus::kOk);
  RedisStoreOptions wrong = options();
  wrong.secret = secret(2);
  auto wrong_secret = open(wrong);
  ASSERT_TRUE(wrong_secret);
  EXPECT_EQ(read(*wrong_secret, record(2), got), StoreStatus::kChecksumMismatch);
  with_secret->drain();
  EXPECT_EQ(read(*with_secret, record(2), got), StoreStatus::kOk);
  EXPECT_EQ(got, b);
  EXPECT_EQ(read(*writer, record(1), got), StoreStatus::kOk);
}

TEST_F(RedisStoreTest, AChangedValueIsACountedMissAndDeleted) {
  auto store = open(options());
  ASSERT_TRUE(store);
  const std::vector<std::byte> b = block(5);
  ASSERT_EQ(write(*store, record(5), b), StoreStatus::kOk);
  const std::string key = redis_key("test", kTag, record(5).key);
  EXPECT_EQ(command({"SETRANGE", key, "100", "x"}).integer,
            static_cast<long long>(kRemoteHeaderBytes + 2 + kBlockBytes));
  std::vector<std::byte> got;
  EXPECT_EQ(read(*store, record(5), got), StoreStatus::kChecksumMismatch);
  EXPECT_EQ(store->stats().checksum_failures, 1);
  EXPECT_FALSE(store->contains(record(5).key));
  // Deleted in the store's next round.
  store->drain();
  EXPECT_EQ(command({"EXISTS", key}).integer, 0);
  // Written again, it is served again.
  ASSERT_EQ(write(*store, record(5), b), StoreStatus::kOk);
  EXPECT_EQ(read(*store, record(5), got), StoreStatus::kOk);
  EXPECT_EQ(got, b);
}

TEST_F(RedisStoreTest, AKeyRedisEvictedIsAPlainMiss) {
  auto store = open(options());
  ASSERT_TRUE(store);
  ASSERT_EQ(write(*store, record(6), block(6)), StoreStatus::kOk);
  EXPECT_TRUE(store->contains(record(6).key));
  command({"DEL", redis_key("test", kTag, record(6).key)});
  std::vector<std::byte> got;
  EXPECT_EQ(read(*store, record(6), got), StoreStatus::kNotFound);
  EXPECT_FALSE(store->contains(record(6).key));
  EXPECT_EQ(store->stats().checksum_failures, 0);
  EXPECT_EQ(store->stats().evictions, 1);
}

TEST_F(RedisStoreTest, AFullRedisRefusesWritesAsNoSpace) {
  auto store = open(options());
  ASSERT_TRUE(store);
  command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  command({"CONFIG", "SET", "maxmemory", "1"});
  EXPECT_EQ(write(*store, record(7), block(7)), StoreStatus::kNoSpace);
  EXPECT_EQ(store->stats().dropped_writes, 1);
  EXPECT_TRUE(store->accepting());  // full is not failing
  command({"CONFIG", "SET", "maxmemory", "0"});
  EXPECT_EQ(write(*store, record(7), block(7)), StoreStatus::kOk);
}

TEST_F(RedisStoreTest, ADeadServerCostsHitsAndTheStoreComesBackByItself) {
  auto store = open(options());
  ASSERT_TRUE(store);
  ASSERT_EQ(write(*store, record(1), block(1)), StoreStatus::kOk);
  server_.stop();
  std::vector<std::byte> got;
  EXPECT_EQ(read(*store, record(1), got), StoreStatus::kIoError);
  EXPECT_FALSE(store->accepting());
  EXPECT_FALSE(store->stats().nodes[0].available);
  EXPECT_FALSE(store->stats().nodes[0].last_error.empty());
  // While open: nothing is tried, and lookups do not wait on it.
  EXPECT_EQ(read(*store, record(1), got), StoreStatus::kUnavailable);
  const std::vector<BlockKey> keys = {record(9).key};
  EXPECT_TRUE(store->knows(keys));

  // Back (empty): the I/O thread's probes close the breaker with no
  // operation asking.
  server_.start();
  ASSERT_TRUE(server_.ready()) << server_.log();
  for (int i = 0; i < 500 && !store->stats().available; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(store->stats().available);
  EXPECT_TRUE(store->accepting());
  EXPECT_EQ(read(*store, record(1), got), StoreStatus::kNotFound);
  EXPECT_EQ(write(*store, record(1), block(1)), StoreStatus::kOk);
  EXPECT_EQ(read(*store, record(1), got), StoreStatus::kOk);
  EXPECT_GE(store->stats().nodes[0].breaker_opened, 1);
}

TEST_F(RedisStoreTest, OpenSaysWhyItCannot) {
  RedisStoreOptions o = options();
  o.addresses = {RedisAddress::unix_socket("/nonexistent/redis.sock")};
  auto none = RedisStore::open(o);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().find("/nonexistent/redis.sock"), std::string::npos) << none.error();
  o = options();
  o.key_namespace = "a{b}";
  auto braces = RedisStore::open(o);
  ASSERT_FALSE(braces.has_value());
  EXPECT_NE(braces.error().find("remote_namespace"), std::string::npos) << braces.error();
  o = options();
  o.password = "not-required";
  EXPECT_FALSE(RedisStore::open(o).has_value());  // AUTH refused by a server without one
}

TEST_F(RedisStoreTest, AnswersAreBoundedAndTheOwnerHearsWhatIsForgotten) {
  RedisStoreOptions o = options();
  o.max_known = 8;
  auto store = open(o);
  ASSERT_TRUE(store);
  const std::vector<std::byte> b = block(0);
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < 12; ++i) tickets.push_back(store->write(record(i), b.data()));
  finish(*store, tickets);
  const std::vector<BlockKey> forgotten = store->take_evicted();
  EXPECT_FALSE(forgotten.empty());
  for (const BlockKey& k : forgotten) EXPECT_FALSE(store->contains(k));
  EXPECT_LE(store->stats().used_blocks, 8u);
  EXPECT_EQ(store->stats().used_blocks + forgotten.size(), 12u);
}

}  // namespace
}  // namespace kvtier::tiers
