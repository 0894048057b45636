// Black-box tests of the remote tier: real kvtierd processes sharing a real
// redis-server the test starts (redis_server.h). A prefix one daemon
// computed is served to another from Redis with the engine's own tokens,
// greedy and seeded; another namespace, cache_salt, model or secret never
// hits; a value changed in Redis is a counted miss, never served; Redis
// killed under load costs hits, never a request, and the tier comes back by
// itself; settings it cannot work with are a log line, and the daemon runs
// without the tier.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "daemon_test_util.h"
#include "redis_server.h"
#include "redis_test_cluster.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;
using test_util::RedisServer;
using test_util::RedisTestCluster;

// Three full 16-token blocks of the bundled character model, then the
// variants' own tails.
const std::string kShared = "Q: What is the difference between a cat and a lion? A: ";

json generate(Client& c, const std::string& prompt, float temperature, std::uint64_t seed,
              json extra = json::object()) {
  json params = generate_params(prompt, 12, temperature, seed);
  params.update(extra);
  return call_result(c, "generate", std::move(params));
}

std::vector<int> tokens_of(const json& result) {
  return result.value("tokens", json::array()).get<std::vector<int>>();
}

json remote_stats(Client& c) { return call_result(c, "tiers")["tiers"]["remote"]; }

// Blocks the daemon chose to recompute although a tier had them (the cost
// model may split a short run: recompute its front while the rest loads).
long skipped_loads(Client& c) {
  return call_result(c, "stats")["cache"].value("skipped_loads", 0L);
}

// generate() on a daemon whose prefix lives in the remote tier: the tokens
// of the prompt the remote tier served, plus those it had and the daemon
// chose to recompute. All of a shared prefix, whatever the cost model
// chose: none missed.
std::pair<json, int> generate_shared(Client& c, const std::string& prompt, float temperature,
                                     std::uint64_t seed) {
  const long skipped = skipped_loads(c);
  json result = generate(c, prompt, temperature, seed);
  const int remote = result["cached_tokens"].value("remote", 0);
  return {std::move(result), remote + 16 * static_cast<int>(skipped_loads(c) - skipped)};
}

// Until the daemon's writes to Redis have landed (they complete after the
// answer), bounded.
void wait_shared(Client& c, long blocks) {
  for (int i = 0; i < 500 && remote_stats(c).value("demotions", 0L) < blocks; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(remote_stats(c).value("demotions", 0L), blocks) << remote_stats(c).dump();
}

class DaemonRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS();
    ASSERT_TRUE(redis_.ready()) << redis_.log();
  }
  // On the CPU: these tests count what the remote tier serves, and on a GPU
  // the cost model rightly recomputes the bundled model's 3-block prefixes
  // instead (its prefill is quicker than a round trip to Redis).
  std::unique_ptr<Daemon> start(std::vector<std::string> args = {}) {
    std::vector<std::string> all = {"--remote", redis_.socket_path(), "--device", "cpu"};
    all.insert(all.end(), args.begin(), args.end());
    auto d = std::make_unique<Daemon>(all);
    EXPECT_TRUE(d->wait_ready()) << d->log();
    return d;
  }

  // A greedy `prompt` whose 48-token prefix is in Redis, sent to fresh
  // daemons started with `args` until one reads that prefix from Redis, at
  // most three: the tests need the blocks read and checked, and a daemon
  // whose start-up measured Redis slow on a busy machine rightly recomputes
  // them instead (a skipped load). Each try must find the whole prefix, read
  // or skipped. Returns the last daemon and its answer.
  std::pair<std::unique_ptr<Daemon>, json> read_shared(const std::vector<std::string>& args,
                                                       const std::string& prompt) {
    std::unique_ptr<Daemon> d;
    json answer;
    for (int attempt = 0; attempt < 3; ++attempt) {
      d = start(args);
      int shared = 0;
      std::tie(answer, shared) = generate_shared(*d->connect(), prompt, 0.0f, 0);
      EXPECT_EQ(shared, 48) << answer.dump();
      if (answer["cached_tokens"]["remote"].get<int>() > 0) break;
    }
    EXPECT_GT(answer["cached_tokens"]["remote"].get<int>(), 0) << answer.dump();
    return {std::move(d), std::move(answer)};
  }

  RedisServer redis_;
};

TEST_F(DaemonRemoteTest, APrefixOneDaemonComputedIsServedToAnotherWithTheSameTokens) {
  auto a = start();
  auto ca = a->connect();
  const json first = generate(*ca, kShared + "one", 0.0f, 0);
  EXPECT_EQ(first["cached_tokens"]["remote"], 0);
  wait_shared(*ca, 3);

  // Greedy, then seeded sampling: a second daemon reads the three shared
  // blocks from Redis and gives the tokens the engine computes cold.
  const auto [b, greedy] = read_shared({}, kShared + "two");
  EXPECT_EQ(tokens_of(greedy), reference(kShared + "two", 12, 0.0f, 0).tokens);
  const json seeded_cold = generate(*ca, kShared + "three", 0.8f, 7);
  const auto [seeded, seeded_shared] =
      generate_shared(*start()->connect(), kShared + "three", 0.8f, 7);
  EXPECT_EQ(seeded_shared, 48) << seeded.dump();
  EXPECT_EQ(tokens_of(seeded), reference(kShared + "three", 12, 0.8f, 7).tokens);
  EXPECT_EQ(tokens_of(seeded), tokens_of(seeded_cold));

  const json remote = remote_stats(*b->connect());
  EXPECT_EQ(remote.value("hits", 0L), 3);
  EXPECT_TRUE(remote.value("available", false));
  ASSERT_EQ(remote["nodes"].size(), 1u);
  EXPECT_EQ(remote["nodes"][0]["address"], redis_.socket_path());
}

TEST_F(DaemonRemoteTest, AnotherNamespaceOrSaltNeverHits) {
  auto a = start();
  auto ca = a->connect();
  generate(*ca, kShared + "one", 0.0f, 0);
  wait_shared(*ca, 3);
  auto other = start({"--remote-namespace", "other"});
  const json elsewhere = generate(*other->connect(), kShared + "two", 0.0f, 0);
  EXPECT_EQ(elsewhere["cached_tokens"]["remote"], 0) << elsewhere.dump();
  auto b = start();
  const json salted = generate(*b->connect(), kShared + "two", 0.0f, 0, {{"cache_salt", "t"}});
  EXPECT_EQ(salted["cached_tokens"]["remote"], 0) << salted.dump();
  EXPECT_EQ(tokens_of(salted), reference(kShared + "two", 12, 0.0f, 0).tokens);
}

// A file of the fleet's secret, readable by its owner only.
std::string secret_file(const std::filesystem::path& dir, const std::string& name, char fill) {
  const std::filesystem::path path = dir / name;
  std::ofstream(path) << std::string(32, fill);
  ::chmod(path.c_str(), 0600);
  return path.string();
}

// The bundled model with one weight changed: the same shapes, vocabulary
// and layout, another model.
std::string altered_model(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path to = dir / "altered-model";
  fs::copy(daemon_test::kModelDir, to, fs::copy_options::recursive);
  std::fstream f(to / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-2, std::ios::end);  // inside the last tensor's last float
  const char byte = static_cast<char>(f.get() ^ 0x01);
  f.seekp(-2, std::ios::end);
  f.put(byte);
  return to.string();
}

TEST_F(DaemonRemoteTest, AnotherModelOrSecretNeverHits) {
  test_util::TempDir dir;
  const std::string ours = secret_file(dir.path(), "ours", 'a');
  const std::string theirs = secret_file(dir.path(), "theirs", 'b');
  auto a = start({"--remote-secret", ours});
  auto ca = a->connect();
  generate(*ca, kShared + "one", 0.0f, 0);
  wait_shared(*ca, 3);

  auto other_model = start({"--remote-secret", ours, "--model", altered_model(dir.path())});
  const json m = generate(*other_model->connect(), kShared + "two", 0.0f, 0);
  EXPECT_EQ(m["cached_tokens"]["remote"], 0) << m.dump();

  // Values under the right keys whose HMAC this daemon cannot check: read,
  // refused, counted; the request prefills.
  auto other_secret = start({"--remote-secret", theirs});
  auto cs = other_secret->connect();
  const json s = generate(*cs, kShared + "two", 0.0f, 0);
  EXPECT_EQ(s["cached_tokens"]["remote"], 0) << s.dump();
  EXPECT_EQ(tokens_of(s), reference(kShared + "two", 12, 0.0f, 0).tokens);
  auto no_secret = start();
  const json n = generate(*no_secret->connect(), kShared + "two", 0.0f, 0);
  EXPECT_EQ(n["cached_tokens"]["remote"], 0) << n.dump();

  // The same secret and model do share: the test could have failed.
  read_shared({"--remote-secret", ours}, kShared + "two");
}

TEST_F(DaemonRemoteTest, AValueChangedInRedisIsACountedMissNeverServed) {
  auto a = start();
  auto ca = a->connect();
  generate(*ca, kShared + "one", 0.0f, 0);
  wait_shared(*ca, 3);
  const tiers::RedisReply keys = redis_.command({"KEYS", "kvtier:*"});
  ASSERT_GE(keys.elements.size(), 3u);                // the prompt's blocks, and maybe the answer's
  for (const tiers::RedisReply& key : keys.elements)  // one byte of each payload
    redis_.command({"SETRANGE", key.str, "4000", "x"});

  auto b = start();
  auto cb = b->connect();
  const json r = generate(*cb, kShared + "two", 0.0f, 0);
  EXPECT_EQ(r["cached_tokens"]["remote"], 0) << r.dump();
  EXPECT_EQ(tokens_of(r), reference(kShared + "two", 12, 0.0f, 0).tokens);
  const json remote = remote_stats(*cb);
  EXPECT_GE(remote.value("checksum_failures", 0L), 1) << remote.dump();
  EXPECT_EQ(remote.value("hits", 0L), 0) << remote.dump();
}

TEST_F(DaemonRemoteTest, RedisKilledUnderLoadFailsNoRequest) {
  auto a = start({"--remote-timeout", "0.2"});
  const std::vector<std::string> tails = {"one", "two", "three", "four"};
  std::vector<std::vector<int>> want;
  for (const std::string& tail : tails)
    want.push_back(reference(kShared + tail, 12, 0.0f, 0).tokens);
  // Two clients send one request after another; Redis dies once a few are
  // answered, and comes back while they still send.
  std::atomic<int> answered{0}, wrong{0};
  const auto client = [&](int first) {
    auto c = a->connect();
    for (int i = 0; i < 12; ++i) {
      const std::size_t k = (first + i) % tails.size();
      const json r = generate(*c, kShared + tails[k], 0.0f, 0);
      if (tokens_of(r) != want[k]) ++wrong;
      ++answered;
    }
  };
  std::thread one(client, 0), two(client, 1);
  while (answered < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  redis_.stop();
  const int killed_at = answered;
  // The clients' prompts may all be in L1 by now, touching Redis no more: a
  // prompt no one sent yet has blocks to look up and write through, so the
  // dead server is met for certain.
  auto c = a->connect();
  const json fresh = generate(*c, kShared + "five", 0.0f, 0);
  EXPECT_EQ(tokens_of(fresh), reference(kShared + "five", 12, 0.0f, 0).tokens) << fresh.dump();
  while (answered < killed_at + 8) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Its write-through runs after the answer: wait for the failed round.
  json remote = remote_stats(*c);
  for (int i = 0; i < 500 && remote["nodes"][0].value("breaker_opened", 0L) < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    remote = remote_stats(*c);
  }
  EXPECT_GE(remote["nodes"][0].value("breaker_opened", 0L), 1) << remote.dump();
  redis_.start();
  one.join();
  two.join();
  EXPECT_EQ(answered, 24);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(call_result(*c, "stats").value("requests_failed", -1L), 0);
  for (int i = 0; i < 500 && !remote_stats(*c).value("available", false); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(remote_stats(*c).value("available", false)) << remote_stats(*c).dump();
}

TEST_F(DaemonRemoteTest, ADeadRedisCostsHitsNeverARequestAndTheTierComesBack) {
  auto a = start({"--remote-timeout", "0.2"});
  auto ca = a->connect();
  redis_.stop();
  // Every request is answered with the engine's tokens while Redis is gone.
  for (const char* tail : {"one", "two", "three"}) {
    const json r = generate(*ca, kShared + tail, 0.0f, 0);
    EXPECT_EQ(tokens_of(r), reference(kShared + tail, 12, 0.0f, 0).tokens) << r.dump();
  }
  json remote = remote_stats(*ca);
  EXPECT_FALSE(remote.value("available", true)) << remote.dump();
  EXPECT_FALSE(remote["nodes"][0].value("last_error", std::string()).empty());

  redis_.start();
  ASSERT_TRUE(redis_.ready()) << redis_.log();
  for (int i = 0; i < 500 && !remote_stats(*ca).value("available", false); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  remote = remote_stats(*ca);
  EXPECT_TRUE(remote.value("available", false)) << remote.dump();
  EXPECT_GE(remote["nodes"][0].value("breaker_opened", 0L), 1);
  // Shared again: a new daemon is served what this one writes now.
  generate(*ca, kShared + "four", 0.0f, 0);
  wait_shared(*ca, 3);
  const auto [served, shared] = generate_shared(*start()->connect(), kShared + "five", 0.0f, 0);
  EXPECT_EQ(shared, 48) << served.dump();
}

TEST_F(DaemonRemoteTest, SettingsItCannotWorkWithAreALogLineAndItRunsWithoutTheTier) {
  const std::vector<std::vector<std::string>> bad = {
      {"--remote", "redis://user:secret@localhost:6379"},
      {"--remote", "/nonexistent/redis.sock"},
      {"--remote", redis_.socket_path(), "--remote-namespace", "a{b}"},
      {"--remote", redis_.socket_path(), "--remote-secret", "/nonexistent/secret"},
  };
  for (const auto& args : bad) {
    std::vector<std::string> all = args;
    all.insert(all.end(), {"--log-level", "info"});
    Daemon d(all);
    ASSERT_TRUE(d.wait_ready()) << d.log();
    EXPECT_TRUE(d.wait_log("prefix cache: remote at " + args[1] + " is not available")) << d.log();
    auto c = d.connect();
    const json r = generate(*c, kShared + "one", 0.0f, 0);
    EXPECT_EQ(tokens_of(r), reference(kShared + "one", 12, 0.0f, 0).tokens);
    EXPECT_FALSE(remote_stats(*c).value("available", true));
  }
}

class DaemonRemoteClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_REDIS_CLUSTER();
    ASSERT_TRUE(cluster_.ready()) << cluster_.log();
  }
  // The seeds as a user writes them: a comma-separated list.
  std::string seeds() const {
    std::string out;
    for (const auto& seed : cluster_.seeds()) out += (out.empty() ? "" : ",") + seed.to_string();
    return out;
  }

  RedisTestCluster cluster_;
};

TEST_F(DaemonRemoteClusterTest, APrefixIsSharedAcrossEveryMaster) {
  // Ten shared blocks, whose keys fall on all three masters. On the CPU, as
  // in DaemonRemoteTest: a GPU may rightly recompute them instead.
  const std::string shared = kShared + kShared + kShared;
  const std::vector<std::string> args = {"--remote", seeds(), "--device", "cpu"};
  auto a = std::make_unique<Daemon>(args);
  ASSERT_TRUE(a->wait_ready()) << a->log();
  auto ca = a->connect();
  generate(*ca, shared + "one", 0.0f, 0);
  wait_shared(*ca, 10);
  for (int n = 0; n < cluster_.size(); ++n)
    EXPECT_GT(cluster_.node(n).command({"DBSIZE"}).integer, 0) << "master " << n;

  // A fresh daemon reads the prefix, unless its cost model, calibrated on a
  // busy machine, rightly finds recomputing cheaper: then another is asked,
  // as DaemonRemoteTest::read_shared does.
  std::unique_ptr<Daemon> b;
  std::unique_ptr<Client> cb;
  json greedy;
  int loaded = 0;
  for (int attempt = 0; attempt < 3 && loaded == 0; ++attempt) {
    b = std::make_unique<Daemon>(args);
    ASSERT_TRUE(b->wait_ready()) << b->log();
    cb = b->connect();
    int greedy_shared = 0;
    std::tie(greedy, greedy_shared) = generate_shared(*cb, shared + "two", 0.0f, 0);
    EXPECT_EQ(greedy_shared, 160) << greedy.dump();
    loaded = greedy["cached_tokens"].value("remote", 0);
  }
  EXPECT_GT(loaded, 0) << greedy.dump();
  EXPECT_EQ(tokens_of(greedy), reference(shared + "two", 12, 0.0f, 0).tokens);
  const json seeded = generate(*cb, shared + "three", 0.8f, 7);
  EXPECT_EQ(tokens_of(seeded), reference(shared + "three", 12, 0.8f, 7).tokens);
  const json remote = remote_stats(*cb);
  EXPECT_EQ(remote.value("hits", 0L), loaded / 16);
  ASSERT_EQ(remote["nodes"].size(), 3u) << remote.dump();
  for (const json& node : remote["nodes"]) EXPECT_TRUE(node.value("available", false)) << node;

  // One master dies: a daemon that has not seen the prefix yet loses the
  // blocks from the first one it held, never a request, and says which
  // node is down.
  cluster_.node(0).stop();
  Daemon c({"--remote", seeds(), "--device", "cpu", "--remote-timeout", "0.2"});
  ASSERT_TRUE(c.wait_ready()) << c.log();
  auto cc = c.connect();
  const json degraded = generate(*cc, shared + "two", 0.0f, 0);
  EXPECT_EQ(tokens_of(degraded), reference(shared + "two", 12, 0.0f, 0).tokens);
  EXPECT_LT(degraded["cached_tokens"]["remote"], 160) << degraded.dump();
  const json after = remote_stats(*cc);
  int down = 0;
  for (const json& node : after["nodes"]) down += node.value("available", true) ? 0 : 1;
  EXPECT_EQ(down, 1) << after.dump();
}

TEST_F(DaemonRemoteClusterTest, AClusterThatServesNoSlotsIsALogLineAndItRunsWithoutTheTier) {
  RedisServer lone(
      true, "",
      {"--cluster-enabled", "yes", "--cluster-port", std::to_string(RedisServer::free_port())});
  ASSERT_TRUE(lone.ready()) << lone.log();
  Daemon d({"--remote", lone.tcp_address().to_string(), "--log-level", "info"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  EXPECT_TRUE(d.wait_log("serves no slots")) << d.log();
  auto c = d.connect();
  const json r = generate(*c, kShared + "one", 0.0f, 0);
  EXPECT_EQ(tokens_of(r), reference(kShared + "one", 12, 0.0f, 0).tokens);
  EXPECT_FALSE(remote_stats(*c).value("available", true));
}

}  // namespace
}  // namespace kvtier
