// The remote tier across a real 3-master Redis Cluster the test creates
// (redis_test_cluster.h): keys go to the master of their hash slot, so a
// prefix's blocks land on every master; MOVED and ASK are followed; a master
// that dies costs the keys of its slots and no others, and comes back by
// itself; a cluster node that serves no slots, or a single server named
// beside others, is refused at open with the reason.
#include "tiers/redis_cluster.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "redis_store_test_util.h"
#include "redis_test_cluster.h"
#include "tiers/redis_store.h"

namespace kvtier::tiers {
namespace {

using test_util::RedisServer;
using test_util::RedisTestCluster;
using namespace std::chrono_literals;

constexpr std::size_t kBlockBytes = 2048;
constexpr std::uint64_t kTag = 0x636c7573746572ULL;

std::vector<std::byte> block(int seed) {
  std::vector<std::byte> v(kBlockBytes);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 13 + seed) & 0xff);
  return v;
}

BlockRecord record(int i) {
  return {BlockKey{0x5000u + static_cast<std::uint64_t>(i), 0x77u}, {std::byte{2}}};
}

std::string key_of(int i) { return redis_key("test", kTag, record(i).key); }

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS_CLUSTER();
    ASSERT_TRUE(cluster_.ready()) << cluster_.log();
  }

  static RedisStoreOptions options(std::vector<RedisAddress> seeds) {
    return test_util::redis_store_options(std::move(seeds), kBlockBytes, kTag);
  }
  static std::unique_ptr<RedisStore> open(const RedisStoreOptions& o) {
    return test_util::open_redis_store(o);
  }
  static std::vector<StoreStatus> finish(RedisStore& store,
                                         const std::vector<std::uint64_t>& tickets) {
    return test_util::finish(store, tickets);
  }
  static StoreStatus write(RedisStore& store, int i) {
    const std::vector<std::byte> b = block(i);
    return finish(store, {store.write(record(i), b.data())})[0];
  }
  // The read's status; a read that is kOk must give the block written.
  static StoreStatus read(RedisStore& store, int i) {
    std::vector<std::byte> got(kBlockBytes);
    const StoreStatus s = finish(store, {store.read(record(i).key, record(i).meta, got.data())})[0];
    if (s == StoreStatus::kOk) {
      EXPECT_EQ(got, block(i)) << i;
    }
    return s;
  }

  RedisTestCluster cluster_;
};

TEST_F(RedisClusterTest, KeysHashToTheSlotsTheServersGiveThem) {
  std::vector<std::string> keys = {
      "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "no{close", ""};
  for (int i = 0; i < 64; ++i) keys.push_back(key_of(i));
  for (const std::string& key : keys)
    EXPECT_EQ(cluster_.node(0).command({"CLUSTER", "KEYSLOT", key}).integer, redis_key_slot(key))
        << key;
}

TEST_F(RedisClusterTest, BlocksGoToEveryMasterAndAreReadFromOneSeed) {
  constexpr int kBlocks = 48;
  // One seed is enough to find the whole cluster.
  auto writer = open(options({cluster_.seeds()[1]}));
  ASSERT_TRUE(writer);
  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < kBlocks; ++i) blocks.push_back(block(i));
  for (int i = 0; i < kBlocks; ++i) tickets.push_back(writer->write(record(i), blocks[i].data()));
  for (StoreStatus s : finish(*writer, tickets)) EXPECT_EQ(s, StoreStatus::kOk);
  EXPECT_EQ(writer->stats().writes, kBlocks);
  long total = 0;
  for (int n = 0; n < cluster_.size(); ++n) {
    const long keys = cluster_.node(n).command({"DBSIZE"}).integer;
    EXPECT_GT(keys, 0) << "master " << n << " holds none of the blocks";
    total += keys;
  }
  EXPECT_EQ(total, kBlocks);
  for (int i = 0; i < kBlocks; i += 7)
    EXPECT_GE(cluster_.owner_of(key_of(i)), 0) << "nobody serves " << key_of(i);

  auto reader = open(options(cluster_.seeds()));
  ASSERT_TRUE(reader);
  std::vector<BlockKey> keys;
  for (int i = 0; i < kBlocks; ++i) keys.push_back(record(i).key);
  for (int i = 0; i < 1000 && !reader->knows(keys); ++i) reader->drain();
  for (const BlockKey& k : keys) EXPECT_TRUE(reader->contains(k));
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(read(*reader, i), StoreStatus::kOk) << i;
  const StoreStats s = reader->stats();
  EXPECT_EQ(s.reads, kBlocks);
  EXPECT_EQ(s.nodes.size(), 3u);
  for (const NodeHealth& node : s.nodes) EXPECT_TRUE(node.available) << node.address;
}

TEST_F(RedisClusterTest, MovedAndAskAreFollowed) {
  auto store = open(options(cluster_.seeds()));
  ASSERT_TRUE(store);
  // MOVED: the (empty) slot of block 1 is given to another master after
  // the store read the map; the store follows, and the block lands there.
  const int from = cluster_.owner_of(key_of(1));
  ASSERT_GE(from, 0);
  const int to = (from + 1) % cluster_.size();
  const std::string slot = std::to_string(redis_key_slot(key_of(1)));
  for (int n : {to, from, (from + 2) % cluster_.size()})
    ASSERT_FALSE(
        cluster_.node(n).command({"CLUSTER", "SETSLOT", slot, "NODE", cluster_.id(to)}).is_error());
  EXPECT_EQ(write(*store, 1), StoreStatus::kOk);
  EXPECT_EQ(cluster_.owner_of(key_of(1)), to);
  EXPECT_EQ(cluster_.node(to).command({"EXISTS", key_of(1)}).integer, 1);
  EXPECT_EQ(read(*store, 1), StoreStatus::kOk);

  // ASK: the slot of block 2 is being migrated; the old master sends the
  // new key on, for this command only (ASKING), and the read follows too.
  const int src = cluster_.owner_of(key_of(2));
  ASSERT_GE(src, 0);
  const int dst = (src + 1) % cluster_.size();
  const std::string slot2 = std::to_string(redis_key_slot(key_of(2)));
  ASSERT_FALSE(cluster_.node(dst)
                   .command({"CLUSTER", "SETSLOT", slot2, "IMPORTING", cluster_.id(src)})
                   .is_error());
  ASSERT_FALSE(cluster_.node(src)
                   .command({"CLUSTER", "SETSLOT", slot2, "MIGRATING", cluster_.id(dst)})
                   .is_error());
  EXPECT_EQ(write(*store, 2), StoreStatus::kOk);
  EXPECT_EQ(cluster_.node(src).command({"CLUSTER", "COUNTKEYSINSLOT", slot2}).integer, 0);
  EXPECT_EQ(cluster_.node(dst).command({"CLUSTER", "COUNTKEYSINSLOT", slot2}).integer, 1);
  EXPECT_EQ(read(*store, 2), StoreStatus::kOk);
  EXPECT_EQ(store->stats().io_errors, 0);
  for (const NodeHealth& node : store->stats().nodes)
    EXPECT_EQ(node.breaker_opened, 0) << node.address;
}

TEST_F(RedisClusterTest, AMasterThatDiesCostsItsKeysOnlyAndComesBackByItself) {
  constexpr int kBlocks = 24;
  auto store = open(options(cluster_.seeds()));
  ASSERT_TRUE(store);
  for (int i = 0; i < kBlocks; ++i) ASSERT_EQ(write(*store, i), StoreStatus::kOk);
  std::vector<int> owner;
  for (int i = 0; i < kBlocks; ++i) owner.push_back(cluster_.owner_of(key_of(i)));
  const int dead = owner[0];
  ASSERT_GE(dead, 0);
  const std::string dead_address = cluster_.node(dead).tcp_address().to_string();
  cluster_.node(dead).stop();

  // The dead master's blocks fail (then are not tried); every other block
  // is served as before.
  int lost = 0;
  for (int i = 0; i < kBlocks; ++i) {
    const StoreStatus s = read(*store, i);
    if (owner[i] == dead) {
      EXPECT_TRUE(s == StoreStatus::kIoError || s == StoreStatus::kUnavailable) << i;
      ++lost;
    } else {
      EXPECT_EQ(s, StoreStatus::kOk) << i;
    }
  }
  EXPECT_GT(lost, 0);
  EXPECT_LT(lost, kBlocks);
  EXPECT_TRUE(store->accepting());
  for (const NodeHealth& node : store->stats().nodes)
    EXPECT_EQ(node.available, node.address != dead_address) << node.address;

  // Started again (empty, with its slots): once it has rejoined (until
  // then it answers CLUSTERDOWN), the breaker closes by itself.
  cluster_.node(dead).start();
  ASSERT_TRUE(cluster_.node(dead).ready()) << cluster_.log();
  ASSERT_TRUE(cluster_.wait_state_ok(dead)) << cluster_.log();
  auto dead_available = [&] {
    for (const NodeHealth& node : store->stats().nodes)
      if (node.address == dead_address) return node.available;
    return false;
  };
  for (int i = 0; i < 500 && !dead_available(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(dead_available());
  EXPECT_EQ(read(*store, 0), StoreStatus::kNotFound);  // its data went with it
  EXPECT_EQ(write(*store, 0), StoreStatus::kOk);
  EXPECT_EQ(read(*store, 0), StoreStatus::kOk);
}

TEST_F(RedisClusterTest, OpenRefusesWhatItCannotRouteBy) {
  // A cluster node that is in no cluster: it serves no slot (and answers
  // CLUSTERDOWN to every key).
  RedisServer lone(
      true, "",
      {"--cluster-enabled", "yes", "--cluster-port", std::to_string(RedisServer::free_port())});
  ASSERT_TRUE(lone.ready()) << lone.log();
  auto none = RedisStore::open(options({lone.tcp_address()}));
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().find("serves no slots"), std::string::npos) << none.error();

  // A single server named beside cluster seeds.
  RedisServer single;
  ASSERT_TRUE(single.ready()) << single.log();
  auto mixed = RedisStore::open(options({single.unix_address(), cluster_.seeds()[0]}));
  ASSERT_FALSE(mixed.has_value());
  EXPECT_NE(mixed.error().find("single Redis server"), std::string::npos) << mixed.error();

  // Seeds that are down are skipped; the first that answers is asked.
  auto past_dead = RedisStore::open(
      options({RedisAddress::unix_socket("/nonexistent/redis.sock"), cluster_.seeds()[2]}));
  ASSERT_TRUE(past_dead.has_value()) << past_dead.error();
  EXPECT_EQ((*past_dead)->stats().nodes.size(), 3u);
}

}  // namespace
}  // namespace kvtier::tiers
