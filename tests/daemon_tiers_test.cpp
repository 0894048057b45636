// Black-box tests of kvtierd's prefix cache and tiers: the real binary on a
// socket in a fresh temporary directory (daemon_test_util.h). Shared
// prefixes are served from L1, from L2 after a flush, and from L3 after a
// restart on the same directory, always with the engine's own tokens; an
// unusable L3 is a warning, not a failure (a file where the directory should
// be, a nearly full disk, l3_bytes beyond the free space, a second daemon on
// the same directory); the cache methods answer, refuse bad settings, and
// keep their privileged ones to the daemon's uid and root.
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "daemon/session.h"
#include "daemon_test_util.h"
#include "engine/cache/block_hash.h"
#include "small_fs.h"
#include "tiers/block_key.h"

namespace kvtier {
namespace {

using namespace daemon_test;
using nlohmann::json;

// Three full 16-token blocks of the bundled character model, then the
// variants' own tails.
const std::string kShared = "Q: What is the difference between a cat and a lion? A: ";

json generate_greedy(Client& c, const std::string& prompt, json extra = json::object()) {
  json params = generate_params(prompt, 12, 0.0f, 0);
  params.update(extra);
  auto r = c.call(request(1, "generate", params));
  EXPECT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  return r && r->contains("result") ? (*r)["result"] : json::object();
}

std::vector<int> tokens_of(const json& result) { return result["tokens"].get<std::vector<int>>(); }

TEST(DaemonTiersTest, SharedPrefixIsServedFromL1WithTheEnginesTokens) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  const json first = generate_greedy(*c, kShared + "one");
  EXPECT_EQ(first["cached_tokens"], (json{{"l1", 0}, {"l2", 0}, {"l3", 0}, {"remote", 0}}));
  EXPECT_EQ(tokens_of(first), reference(kShared + "one", 12, 0.0f, 0).tokens);
  const json second = generate_greedy(*c, kShared + "two");
  EXPECT_GT(second["cached_tokens"]["l1"].get<int>(), 0);
  EXPECT_EQ(tokens_of(second), reference(kShared + "two", 12, 0.0f, 0).tokens);

  const json stats = call_result(*c, "stats");
  ASSERT_TRUE(stats["cache"].is_object()) << stats.dump();
  EXPECT_GT(stats["cache"]["tiers"]["l1"]["hits"].get<long>(), 0);
  EXPECT_GT(stats["cache"]["recompute_tokens_avoided"].get<long>(), 0);
  for (const char* key :
       {"swapped", "swapped_out", "swapped_in", "discarded_passes", "evicted_blocks"})
    EXPECT_TRUE(stats.contains(key)) << key;
  shutdown(d);
}

TEST(DaemonTiersTest, AfterFlushingL1ThePrefixComesFromL2) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  generate_greedy(*c, kShared + "one");
  const json flushed = call_result(*c, "cache.flush", {{"tier", "l1"}});
  EXPECT_GT(flushed["dropped"]["l1"].get<int>(), 0);
  const json lookup = call_result(*c, "cache.lookup", {{"prompt", kShared + "two"}});
  EXPECT_GT(lookup["tiers"]["l2"].get<int>(), 0);
  EXPECT_EQ(lookup["tiers"]["l1"], 0);
  const json second = generate_greedy(*c, kShared + "two");
  EXPECT_GT(second["cached_tokens"]["l2"].get<int>(), 0);
  EXPECT_EQ(second["cached_tokens"]["l1"], 0);
  EXPECT_EQ(tokens_of(second), reference(kShared + "two", 12, 0.0f, 0).tokens);
  shutdown(d);
}

// On the CPU: on a GPU the cost model rightly recomputes the bundled model's
// 3-block prefix rather than read it from L3 (the GPU's own restart:
// CudaKvCacheTest.ARestartServesThePrefixFromL3IntoDeviceMemory).
TEST(DaemonTiersTest, RestartOnTheSameL3DirectoryServesThePrefixFromL3) {
  test_util::TempDir dir;
  const std::vector<std::string> args = {"--l3-path",      (dir.path() / "l3").string(),
                                         "--l3-bytes",     "64M",
                                         "--write-policy", "write_through",
                                         "--device",       "cpu"};
  std::vector<int> before;
  {
    Daemon d(args);
    ASSERT_TRUE(d.wait_ready());
    auto c = d.connect();
    const json tiers = call_result(*c, "tiers");
    EXPECT_EQ(tiers["tiers"]["l3"]["available"], true) << d.log();
    before = tokens_of(generate_greedy(*c, kShared + "one"));
    shutdown(d);  // exits 0 once the L3 writes in flight are on disk
  }
  // A restart reads the prefix from L3, unless the cost model, timed on a
  // busy machine, rightly finds recomputing it cheaper: then another restart
  // is asked (as daemon_remote_test does for its remote tier).
  json second;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Daemon d(args);
    ASSERT_TRUE(d.wait_ready());
    auto c = d.connect();
    second = generate_greedy(*c, kShared + "two");
    EXPECT_EQ(tokens_of(second), reference(kShared + "two", 12, 0.0f, 0).tokens);
    const json again = generate_greedy(*c, kShared + "one");
    EXPECT_EQ(tokens_of(again), before);
    shutdown(d);
    if (second["cached_tokens"]["l3"].get<int>() > 0) break;
  }
  EXPECT_GT(second["cached_tokens"]["l3"].get<int>(), 0) << second.dump();
}

TEST(DaemonTiersTest, UnusableL3IsAWarningAndTheDaemonRunsOnL1AndL2) {
  test_util::TempDir dir;
  const auto file = dir.write("not-a-directory", "x");
  Daemon d({"--l3-path", (file / "l3").string()});
  ASSERT_TRUE(d.wait_ready());
  EXPECT_TRUE(
      d.wait_log("warning: prefix cache: L3 at " + (file / "l3").string() + " is not available"))
      << d.log();
  auto c = d.connect();
  const json tiers = call_result(*c, "tiers");
  EXPECT_EQ(tiers["tiers"]["l3"]["available"], false);
  EXPECT_EQ(tiers["tiers"]["l2"]["available"], true);
  EXPECT_TRUE(tiers.contains("costs"));
  EXPECT_EQ(tokens_of(generate_greedy(*c, kShared + "one")),
            reference(kShared + "one", 12, 0.0f, 0).tokens);
  shutdown(d);
}

// L3 on a file system with 256 KiB left: RocksDB used to abort start-up
// there (a restart loop under systemd). Now L3 is off, the log says why, and
// the daemon serves and shuts down cleanly.
TEST(DaemonTiersTest, NearlyFullDiskTurnsL3OffAndTheDaemonServes) {
  test_util::SmallFs fs(test_util::SmallFs::Kind::kExt4, 48 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  const auto l3 = fs.path() / "l3";
  std::filesystem::create_directories(l3);
  fs.fill_leaving(256 << 10);
  Daemon d({"--l3-path", l3.string(), "--l3-bytes", "1M"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  EXPECT_TRUE(d.wait_log("L3 disabled: L3: not enough free space in " + l3.string())) << d.log();
  auto c = d.connect();
  EXPECT_EQ(call_result(*c, "tiers")["tiers"]["l3"]["available"], false);
  EXPECT_EQ(tokens_of(generate_greedy(*c, kShared + "one")),
            reference(kShared + "one", 12, 0.0f, 0).tokens);
  shutdown(d);
}

// --l3-bytes far beyond the free space: refused before anything is taken, so
// no slab (nor directory) is left behind and the free space is what it was.
TEST(DaemonTiersTest, L3BytesBeyondTheFreeSpaceLeaveNoSlabBehind) {
  test_util::SmallFs fs(test_util::SmallFs::Kind::kExt4, 32 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  const auto l3 = fs.path() / "l3";
  const std::uint64_t free = fs.free_bytes();
  {
    Daemon d({"--l3-path", l3.string(), "--l3-bytes", "1T"});
    ASSERT_TRUE(d.wait_ready()) << d.log();
    EXPECT_TRUE(d.wait_log("L3 disabled: L3: not enough free space in " + l3.string())) << d.log();
    // (Its directory, made and removed again, took a block meanwhile.)
    EXPECT_TRUE(test_util::contains(d.log(), "1099511627776 for the slab"));
    auto c = d.connect();
    EXPECT_EQ(call_result(*c, "tiers")["tiers"]["l3"]["available"], false);
    shutdown(d);
  }
  EXPECT_FALSE(std::filesystem::exists(l3));
  EXPECT_EQ(fs.free_bytes(), free);
}

// A second daemon on the same l3_path: the index is in use, which is not
// damage. The second runs without L3 and says who has it; the first keeps
// its index where it is.
TEST(DaemonTiersTest, SecondDaemonOnTheSameL3PathRunsWithoutL3) {
  test_util::TempDir dir;
  const std::vector<std::string> args = {"--l3-path", (dir.path() / "l3").string(), "--l3-bytes",
                                         "16M"};
  Daemon first(args);
  ASSERT_TRUE(first.wait_ready()) << first.log();
  Daemon second(args);
  ASSERT_TRUE(second.wait_ready()) << second.log();
  EXPECT_TRUE(second.wait_log("is in use by process " + std::to_string(first.pid())))
      << second.log();
  auto c = second.connect();
  EXPECT_EQ(call_result(*c, "tiers")["tiers"]["l3"]["available"], false);
  auto c1 = first.connect();
  EXPECT_EQ(call_result(*c1, "tiers")["tiers"]["l3"]["available"], true);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "l3" / "index.damaged"));
  shutdown(second);
  shutdown(first);
}

TEST(DaemonTiersTest, TierSettingsShowInConfigGetAndReadOnly) {
  Daemon d({"--l2-bytes", "16M", "--eviction", "none"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  const json config = call_result(*c, "config.get");
  EXPECT_EQ(config["l2_bytes"]["value"], 16 << 20);
  EXPECT_EQ(config["prefix_cache"]["value"], true);
  EXPECT_EQ(config["preemption"]["value"], "swap");
  EXPECT_EQ(config["write_policy"]["value"], "write_back");
  EXPECT_EQ(config["l3_path"]["value"], "");
  EXPECT_EQ(config["eviction"]["value"], "none");
  EXPECT_EQ(config["load_by_layer"]["value"], true);
  for (const char* name : {"prefix_cache", "l1_bytes", "l2_bytes", "l3_path", "l3_bytes",
                           "write_policy", "load_by_layer", "preemption", "eviction"}) {
    EXPECT_EQ(config[name]["runtime"], false) << name;
  }
  auto refused = c->call(request(3, "config.set", {{"l2_bytes", 1}}));
  EXPECT_EQ(error_code(refused), -32602);
  EXPECT_TRUE(test_util::contains((*refused)["error"]["message"].get<std::string>(),
                                  "restart it with --l2-bytes"));
  shutdown(d);
}

TEST(DaemonTiersTest, BadTierSettingsAreRefusedWithAClearMessage) {
  test_util::TempDir dir;
  const std::vector<std::string> base = {"--socket", (dir.path() / "s.sock").string(), "--model",
                                         kModelDir.string()};
  const auto config = dir.write("kvtierd.toml", "write-policy = \"later\"\n");
  expect_refused(
      base, {
                {{"--l2-bytes", "lots"}, "--l2-bytes"},
                {{"--l1-bytes", "-5"}, "--l1-bytes"},
                {{"--write-policy", "sometimes"}, "--write-policy"},
                {{"--preemption", "later"}, "--preemption"},
                {{"--no-prefix-cache", "--preemption", "swap"}, "prefix cache"},
                {{"--no-prefix-cache", "--l3-path", (dir.path() / "l3").string()}, "prefix cache"},
                {{"--l3-path", (dir.path() / "l3").string(), "--l3-bytes", "0"}, "--l3-bytes"},
                {{"--eviction", "sometimes"}, "--eviction"},
                {{"--eviction", "window:0"}, "--eviction"},
                {{"--eviction", "h2o:start=3,recent=16,max=64"}, "--eviction"},
                {{"--config", config.string()}, "write-policy"},
            });
}

TEST(DaemonTiersTest, CacheMethodsAreAClearErrorWithoutThePrefixCache) {
  Daemon d({"--no-prefix-cache"});
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  const json prompt = {{"prompt", kShared}};
  for (const auto& [method, params] :
       std::vector<std::pair<std::string, json>>{{"tiers", json::object()},
                                                 {"cache.lookup", prompt},
                                                 {"cache.warm", prompt},
                                                 {"cache.pin", prompt},
                                                 {"cache.unpin", prompt},
                                                 {"cache.tree", json::object()},
                                                 {"cache.flush", {{"tier", "all"}}},
                                                 {"cache.subscribe", json::object()}}) {
    auto r = c->call(request(4, method, params));
    EXPECT_EQ(error_code(r), -32004) << method;
    if (error_code(r) == -32004) {
      EXPECT_TRUE(
          test_util::contains((*r)["error"]["message"].get<std::string>(), "--prefix-cache"));
    }
  }
  const json result = generate_greedy(*c, kShared + "one");
  EXPECT_EQ(result["cached_tokens"], (json{{"l1", 0}, {"l2", 0}, {"l3", 0}, {"remote", 0}}));
  EXPECT_TRUE(call_result(*c, "stats")["cache"].is_null());
  EXPECT_EQ(call_result(*c, "config.get")["preemption"]["value"], "recompute");
  shutdown(d);
}

TEST(DaemonTiersTest, WarmLookupPinTreeAndFlush) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto c = d.connect();
  const json prompt = {{"prompt", kShared}};
  const int cacheable = (static_cast<int>(kShared.size()) - 1) / 16 * 16;
  EXPECT_EQ(call_result(*c, "cache.lookup", prompt)["cached_tokens"], 0);

  const json warmed = call_result(*c, "cache.warm", prompt);
  EXPECT_EQ(warmed["prompt_tokens"], kShared.size());
  EXPECT_EQ(warmed["lookup"]["cached_tokens"], cacheable);
  const json lookup = call_result(*c, "cache.lookup", prompt);
  EXPECT_EQ(lookup["cached_tokens"], cacheable);
  EXPECT_EQ(lookup["tiers"]["l1"], cacheable);
  // Another namespace shares nothing.
  EXPECT_EQ(call_result(*c, "cache.lookup",
                        {{"prompt", kShared}, {"cache_salt", "tenant-b"}})["cached_tokens"],
            0);

  const json pinned = call_result(*c, "cache.pin", prompt);
  EXPECT_EQ(pinned["blocks"], cacheable / 16);
  const json tree = call_result(*c, "cache.tree");
  EXPECT_EQ(tree["pinned"], cacheable / 16);
  ASSERT_FALSE(tree["largest"].empty()) << tree.dump();
  EXPECT_EQ(tree["largest"][0]["first_text"], kShared.substr(0, 16));
  // Pinned blocks survive a flush of every tier.
  call_result(*c, "cache.flush", {{"tier", "all"}});
  EXPECT_EQ(call_result(*c, "cache.lookup", prompt)["cached_tokens"], cacheable);
  EXPECT_EQ(call_result(*c, "cache.unpin", prompt)["blocks"], cacheable / 16);
  const json flushed = call_result(*c, "cache.flush", {{"tier", "all"}});
  EXPECT_GT(flushed["dropped"]["l2"].get<int>(), 0) << flushed.dump();
  EXPECT_EQ(call_result(*c, "cache.lookup", prompt)["cached_tokens"], 0);

  // Bad parameters get -32602 and a message naming what is wrong.
  EXPECT_EQ(error_code(c->call(request(5, "cache.flush", {{"tier", "l4"}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(5, "cache.lookup", json::object()))), -32602);
  EXPECT_EQ(error_code(c->call(request(5, "cache.lookup", {{"tokens", {1, 100000}}}))), -32602);
  EXPECT_EQ(error_code(c->call(request(5, "cache.lookup", {{"prompt", "x"}, {"salt", "y"}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(
                request(5, "generate", {{"prompt", "x"}, {"cache_salt", std::string(300, 's')}}))),
            -32602);
  EXPECT_EQ(error_code(c->call(request(5, "generate", {{"prompt", "x"}, {"eviction", "most"}}))),
            -32602);
  // A request with an eviction policy runs, and its salt keeps it apart.
  const json windowed =
      generate_greedy(*c, kShared + "one", {{"eviction", "window:32"}, {"cache_salt", "t"}});
  EXPECT_EQ(windowed["completion_tokens"], 12);
  shutdown(d);
}

TEST(DaemonTiersTest, PinUnpinAndFlushArePrivileged) {
  for (const daemon::Session::Method& m : daemon::Session::methods()) {
    const std::string name = m.name;
    const bool want = name == "shutdown" || name == "config.set" || name == "cache.pin" ||
                      name == "cache.unpin" || name == "cache.flush";
    EXPECT_EQ(m.privileged, want) << name;
  }
}

// As a uid other than the daemon's: refused with -32003. Needs root to
// change uid; the child keeps gid 0 so the 0660 socket still lets it in.
TEST(DaemonTiersTest, AnotherUidIsRefusedPinUnpinAndFlush) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  const std::string ctl = daemon_test::kCtlPath.string();
  const auto as_nobody = [] {
    const gid_t root_group = 0;
    if (::setgroups(1, &root_group) != 0 || ::setgid(0) != 0 || ::setuid(65534) != 0) ::_exit(100);
  };
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"cache", "pin", kShared}, {"cache", "unpin", kShared}, {"cache", "flush", "all"}}) {
    std::vector<std::string> args = {ctl, "--socket", d.socket_path()};
    args.insert(args.end(), cmd.begin(), cmd.end());
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const auto ran = util::run_child(
        args, {.stdout_fd = null, .stderr_fd = null, .in_child = as_nobody}, kTimeout);
    ::close(null);
    if (!ran) {  // exec failed: a folder above the build is closed to it
      shutdown(d);
      GTEST_SKIP() << "uid 65534 cannot execute " << ctl
                   << " (a parent folder is not searchable by it, e.g. a mktemp -d clone): "
                   << ran.error();
    }
    ASSERT_FALSE(ran->killed);
    ASSERT_TRUE(WIFEXITED(ran->status));
    EXPECT_EQ(WEXITSTATUS(ran->status), 4) << cmd[1] << " (4: kvtierd answered with an error)";
  }
  EXPECT_TRUE(d.wait_log("refused 'cache.flush' from uid 65534")) << d.log();
  shutdown(d);
}

// cache.subscribe: a snapshot, then every change as numbered batches. A
// prompt's blocks arrive in L1 under the keys a router computes from the
// prompt alone (root_key of the snapshot's fingerprint, then chain_key a
// page at a time); a flush moves them to L2; replaying the events on the
// first snapshot gives what a later subscriber's snapshot says.
TEST(DaemonTiersTest, CacheSubscribeStreamsWhatTheCacheHolds) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready());
  auto watcher = d.connect();
  EXPECT_EQ(error_code(watcher->call(request(9, "cache.subscribe", {{"since", 3}}))), -32602);
  const auto first = watcher->call(request(1, "cache.subscribe"));
  ASSERT_TRUE(first && first->contains("result")) << (first ? first->dump() : "no answer");
  const json& snap = (*first)["result"];
  ASSERT_EQ(snap["fingerprint"].get<std::string>().size(), 16u) << snap.dump();
  const int page = snap["page_size"].get<int>();
  std::set<std::pair<std::string, std::string>> held;  // (block, tier)
  for (const json& b : snap["blocks"])
    held.emplace(b["block"].get<std::string>(), b["tier"].get<std::string>());
  std::uint64_t seq = snap["seq"].get<std::uint64_t>();
  // Reads batches until `done` says the replayed cache is what it waits for.
  const auto follow = [&](const std::function<bool()>& done) {
    while (!done()) {
      const auto msg = watcher->read();
      if (!msg) return false;
      if (msg->value("method", "") != "cache.events") continue;
      const json& params = (*msg)["params"];
      EXPECT_EQ(params["seq"].get<std::uint64_t>(), seq + 1) << "a batch skipped or repeated";
      seq = params["seq"].get<std::uint64_t>();
      for (const json& e : params["events"]) {
        const auto where =
            std::make_pair(e["block"].get<std::string>(), e["tier"].get<std::string>());
        if (e["stored"].get<bool>())
          EXPECT_TRUE(held.insert(where).second) << e.dump();
        else
          EXPECT_EQ(held.erase(where), 1u) << e.dump();
      }
    }
    return true;
  };

  std::vector<int> prompt(50);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>(5 + i * 7 % 60);
  auto c = d.connect();
  const auto done =
      c->call(request(2, "generate", {{"tokens", prompt}, {"max_tokens", 4}, {"temperature", 0}}));
  ASSERT_TRUE(done && done->contains("result")) << (done ? done->dump() : "no answer");
  std::vector<std::string> keys;  // the prompt's full blocks, as a router finds them
  tiers::BlockKey key =
      root_key(std::stoull(snap["fingerprint"].get<std::string>(), nullptr, 16), "");
  for (std::size_t at = 0; at + page <= prompt.size(); at += static_cast<std::size_t>(page)) {
    key = chain_key(key, std::span(prompt).subspan(at, static_cast<std::size_t>(page)));
    keys.push_back(tiers::to_hex(key));
  }
  ASSERT_EQ(keys.size(), 3u);
  const auto all_in = [&](const char* tier) {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) {
      return held.contains({k, tier});
    });
  };
  ASSERT_TRUE(follow([&] { return all_in("l1"); })) << "the prompt's blocks never arrived in L1";

  const auto flushed = c->call(request(3, "cache.flush", {{"tier", "l1"}}));
  ASSERT_TRUE(flushed && flushed->contains("result")) << (flushed ? flushed->dump() : "no answer");
  ASSERT_TRUE(follow([&] { return all_in("l2"); })) << "the flush's moves never arrived";
  for (const std::string& k : keys) EXPECT_FALSE(held.contains({k, "l1"})) << k;

  const auto second = d.connect()->call(request(4, "cache.subscribe"));
  ASSERT_TRUE(second && second->contains("result"));
  const std::uint64_t upto = (*second)["result"]["seq"].get<std::uint64_t>();
  ASSERT_TRUE(follow([&] { return seq >= upto; }));
  std::set<std::pair<std::string, std::string>> later;
  for (const json& b : (*second)["result"]["blocks"])
    later.emplace(b["block"].get<std::string>(), b["tier"].get<std::string>());
  EXPECT_EQ(held, later);
  shutdown(d);
}

}  // namespace
}  // namespace kvtier
