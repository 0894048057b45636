// kvtier-router against daemons that misbehave or refuse: events lost, a
// line cut short, a stream that keeps breaking, another model's
// fingerprint, a daemon full or draining. The real kvtierd never does the
// first ones and cannot be made to refuse on cue, so that daemon is a
// script on a Unix socket; the router (and, where one is needed, the other
// daemon) are the real ones. Each fault must cost hits or a retry, never a
// route on stale blocks or a lost request, and a stream that keeps
// breaking takes the daemon out of use instead of a busy loop.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "daemon_test_util.h"
#include "router_test_util.h"
#include "scripted_daemon.h"
#include "tiers/block_key.h"

namespace kvtier::daemon_test {
namespace {

std::string key_hex(std::uint64_t n) { return tiers::to_hex({n, n}); }

json events(std::uint64_t seq, const std::vector<std::string>& stored) {
  json e = json::array();
  for (const auto& k : stored) e.push_back({{"block", k}, {"tier", "l1"}, {"stored", true}});
  return {
      {"jsonrpc", "2.0"}, {"method", "cache.events"}, {"params", {{"seq", seq}, {"events", e}}}};
}

int l1_blocks(const json& d) { return d["blocks"]["l1"].get<int>(); }

TEST(RouterFaultsTest, LostOrGarbledEventsCostASnapshotAndAStreamThatKeepsBreakingIsTakenOut) {
  test_util::TempDir dir;
  ScriptedDaemon daemon(dir.path(), "00000000000000aa",
                        {{key_hex(1)}, {key_hex(1), key_hex(2), key_hex(3)}, {key_hex(7)}});
  RouterProcess router({daemon.path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true && l1_blocks(d) == 1; });

  // Seq 10 was the snapshot: 11 follows, and is applied.
  daemon.send(events(11, {key_hex(2)}).dump());
  router.wait_for(0, [](const json& d) { return l1_blocks(d) == 2; });

  // 13 after 11: a batch was lost. A fresh snapshot (three blocks) replaces
  // the index; the daemon stayed usable throughout.
  daemon.send(events(13, {key_hex(4)}).dump());
  json d = router.wait_for(0, [](const json& d) { return l1_blocks(d) == 3; });
  EXPECT_EQ(d["resyncs"], 1);
  EXPECT_EQ(d["downs"], 0);
  EXPECT_EQ(d["usable"], true);

  // A line cut short, more than a second later: one more snapshot.
  std::this_thread::sleep_for(1100ms);
  daemon.send(R"({"jsonrpc":"2.0","method":"cache.events","params":{"seq":31,"ev)");
  d = router.wait_for(0, [](const json& d) { return d["resyncs"] == 2 && l1_blocks(d) == 1; });
  EXPECT_EQ(d["downs"], 0);

  // Broken again at once: out of use (then tried again, and back).
  const int subscribed = daemon.subscriptions;
  daemon.send("{not json");
  d = router.wait_for(0, [](const json& d) { return d["downs"] == 1; });
  d = router.wait_for(0, [&](const json& d) { return d["usable"] == true; });
  EXPECT_GT(daemon.subscriptions, subscribed);
}

// A daemon's load is what its `stats` count: a count that is not an
// integer >= 0 takes it out (it is not weighed by a guess), until its
// stats make sense again; `backlog_rows` may be missing (an older daemon).
TEST(RouterFaultsTest, StatsThatAreNotCountsTakeADaemonOutUntilTheyAre) {
  test_util::TempDir dir;
  ScriptedDaemon daemon(dir.path(), "00000000000000aa", {{key_hex(1)}});
  RouterProcess router({daemon.path()});
  json d = router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  EXPECT_EQ(d["backlog_rows"], 0);

  daemon.set_stats({{"pending", 0}, {"backlog_rows", "many"}});
  d = router.wait_for(0, [](const json& d) { return d["usable"] == false; });
  EXPECT_TRUE(test_util::contains(d["last_error"].get<std::string>(), "'backlog_rows'"))
      << d.dump();

  daemon.set_stats({{"pending", -1}, {"backlog_rows", 3}});
  d = router.wait_for(0, [](const json& d) {
    return test_util::contains(d["last_error"].get<std::string>(), "'pending'");
  });
  EXPECT_EQ(d["usable"], false);

  daemon.set_stats({{"pending", 2}, {"backlog_rows", 40}});
  router.wait_for(0, [](const json& d) {
    return d["usable"] == true && d["pending"] == 2 && d["backlog_rows"] == 40;
  });
}

TEST(RouterFaultsTest, ADaemonOfAnotherFingerprintIsNotUsed) {
  test_util::TempDir dir;
  ScriptedDaemon first(dir.path(), "00000000000000aa", {{key_hex(1)}});
  ScriptedDaemon other(dir.path(), "00000000000000bb", {{key_hex(1)}});
  other.hold_subscribe = true;  // the first sets the fleet's fingerprint
  RouterProcess router({first.path(), other.path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  other.hold_subscribe = false;
  const json d = router.wait_for(1, [](const json& d) {
    return test_util::contains(d["last_error"].get<std::string>(), "fingerprint");
  });
  EXPECT_EQ(d["usable"], false);
  EXPECT_EQ(l1_blocks(d), 0);
}

// A daemon that is full (-32000) or draining (-32002) refuses for now: the
// request goes to another, and only when none takes it does the refusal
// come back.
TEST(RouterFaultsTest, ARequestRefusedForNowIsSentToAnotherDaemon) {
  test_util::TempDir dir;
  Daemon real;
  ASSERT_TRUE(real.wait_ready()) << real.log();
  auto c = real.connect();
  auto snapshot = c->call(request(1, "cache.subscribe"));
  ASSERT_TRUE(snapshot && snapshot->contains("result"));
  // The real daemon's fingerprint, so both are of the fleet; the scripted
  // one's prefill is the cheaper, so every request goes to it first.
  ScriptedDaemon full(dir.path(), (*snapshot)["result"]["fingerprint"], {{}});
  full.refuse_with = -32000;
  RouterProcess router({full.path(), real.socket_path()});
  router.wait_for(0, [](const json& d) { return d["usable"] == true; });
  router.wait_for(1, [](const json& d) { return d["usable"] == true; });

  Client via(router.socket_path());
  const json params = {{"prompt", "Q: What is a towel for?"}, {"max_tokens", 4}, {"seed", 1}};
  auto r = via.call(request(2, "generate", params));
  ASSERT_TRUE(r && r->contains("result")) << (r ? r->dump() : "no answer");
  EXPECT_EQ(router.fleet()["choices"]["retried"], 1);

  // Draining refuses too; with the real daemon gone, the refusal itself
  // comes back.
  full.refuse_with = -32002;
  ASSERT_EQ(::kill(real.pid(), SIGKILL), 0);
  router.wait_for(1, [](const json& d) { return d["usable"] == false; });
  r = via.call(request(3, "generate", params));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)["error"]["code"], -32002) << r->dump();
  EXPECT_EQ((*r)["error"]["message"], "scripted refusal");
}

}  // namespace
}  // namespace kvtier::daemon_test
