// kvtier-router in front of real kvtierd daemons: where it sends requests,
// what comes back (the daemon's answer, with the router's ids), what it
// refuses, and how it takes a daemon out and back.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "daemon_test_util.h"
#include "router/route_choice.h"
#include "router_test_util.h"

namespace kvtier::daemon_test {
namespace {

// A prompt of several full blocks of the bundled model (page size 16).
const std::string kPrompt =
    "Q: What is the meaning of life and everything in the universe? A: It is " +
    std::string("forty-two, of course, and a towel. ");

json generate(Client& c, int id, json params) {
  auto r = c.call(request(id, "generate", std::move(params)));
  return r ? *r : json();
}

// The router's `fleet.route` for a prompt: where it would go and why.
json route(Client& c, const std::string& prompt) {
  auto r = c.call(request(1, "fleet.route", {{"prompt", prompt}}));
  return r && r->contains("result") ? (*r)["result"] : json();
}

// `route` once the router has the daemon's events for the prompt (they may
// come after the answer): its choice by prefix, or its last one at the timeout.
json route_by_prefix(Client& c, const std::string& prompt) {
  json seen;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = route(c, prompt);
    if (seen["reason"] == "prefix") break;
    std::this_thread::sleep_for(20ms);
  }
  return seen;
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* d : {&a_, &b_}) ASSERT_TRUE(d->wait_ready()) << d->log();
    router_ = std::make_unique<RouterProcess>(
        std::vector<std::string>{a_.socket_path(), b_.socket_path()});
    ASSERT_TRUE(router_->wait_usable(0, true)) << router_->log();
    ASSERT_TRUE(router_->wait_usable(1, true)) << router_->log();
  }

  Daemon a_, b_;
  std::unique_ptr<RouterProcess> router_;
};

TEST_F(RouterTest, ARepeatedPromptGoesWhereItsPrefixIsAndGetsTheSameTokens) {
  auto c = router_->connect();
  ASSERT_TRUE(c->valid());
  const json params = {{"prompt", kPrompt}, {"max_tokens", 12}, {"seed", 5}};
  const json first = generate(*c, 1, params);
  ASSERT_TRUE(first.contains("result")) << first.dump();
  // Once the daemon's events have reached the router (they may come after
  // the answer; the second turn would go to the same daemon anyway, by the
  // prompt's rendezvous score, but counted as cold).
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  for (bool indexed = false; !indexed && std::chrono::steady_clock::now() < deadline;) {
    const json fleet = router_->fleet();
    for (const json& d : fleet["daemons"]) indexed |= d["blocks"]["l1"].get<int>() > 0;
    if (!indexed) std::this_thread::sleep_for(10ms);
  }
  const json second = generate(*c, 2, params);
  ASSERT_TRUE(second.contains("result")) << second.dump();
  EXPECT_EQ(second["id"], 2);
  EXPECT_EQ(second["result"]["tokens"], first["result"]["tokens"]);
  // The second found the first's blocks in L1: it went to the same daemon.
  EXPECT_GT(second["result"]["cached_tokens"]["l1"].get<int>(), 0) << second.dump();
  EXPECT_NE(second["result"]["id"], first["result"]["id"]);

  const json fleet = router_->fleet();
  EXPECT_EQ(fleet["choices"]["prefix"], 1) << fleet.dump();
  EXPECT_EQ(fleet["choices"]["cold"], 1) << fleet.dump();
  EXPECT_GT(fleet["cached_tokens"]["l1"].get<int>(), 0);
  int holders = 0;
  for (const json& d : fleet["daemons"]) holders += d["blocks"]["l1"].get<int>() > 0;
  EXPECT_EQ(holders, 1) << fleet.dump();

  // kvtierctl pointed at the router shows the fleet.
  const std::string ctl = daemon_test::kCtlPath.string();
  const ProcessResult shown =
      run_process({ctl, "-s", router_->socket_path(), "fleet"}, router_->dir());
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  for (const std::string& needle : {a_.socket_path(), b_.socket_path(), std::string("backlog rows"),
                                    std::string("prefix 1"), std::string("cold 1")})
    EXPECT_TRUE(test_util::contains(shown.out, needle)) << needle << " in\n" << shown.out;
  const ProcessResult health =
      run_process({ctl, "-s", router_->socket_path(), "health"}, router_->dir());
  EXPECT_TRUE(test_util::contains(health.out, "router: 2 of 2 daemons usable")) << health.out;

  // Each daemon, asked directly, gives the same tokens.
  for (Daemon* d : {&a_, &b_}) {
    auto direct = d->connect();
    const json r = generate(*direct, 3, params);
    ASSERT_TRUE(r.contains("result")) << r.dump();
    EXPECT_EQ(r["result"]["tokens"], first["result"]["tokens"]);
  }
}

// Two routers in front of the same daemons, fed the same events, choose
// alike: a new prompt by its rendezvous score, one a daemon holds by what
// it holds, whichever router sent it there.
TEST_F(RouterTest, TwoRoutersChooseAlike) {
  RouterProcess second({a_.socket_path(), b_.socket_path()});
  ASSERT_TRUE(second.wait_usable(0, true)) << second.log();
  ASSERT_TRUE(second.wait_usable(1, true)) << second.log();
  auto one = router_->connect();
  auto two = second.connect();
  for (int i = 0; i < 8; ++i) {
    const std::string prompt = "Q: Question number " + std::to_string(i) + " of eight? A:";
    const json r1 = route(*one, prompt), r2 = route(*two, prompt);
    ASSERT_TRUE(r1.is_object() && r2.is_object());
    EXPECT_EQ(r1["daemon"], r2["daemon"]) << r1.dump() << "\n" << r2.dump();
    EXPECT_EQ(r1["reason"], "cold");
    EXPECT_EQ(r1["daemons"].size(), 2u);
  }

  // Sent through the first router, the prompt is then where the second
  // would send it too, for what that daemon now holds.
  const json r = generate(*one, 2, {{"prompt", kPrompt}, {"max_tokens", 4}, {"seed", 2}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  const json held = route_by_prefix(*one, kPrompt);
  ASSERT_EQ(held["reason"], "prefix") << held.dump();
  const std::string holder = held["daemon"];
  const json seen = route_by_prefix(*two, kPrompt);
  EXPECT_EQ(seen["reason"], "prefix") << seen.dump();
  EXPECT_EQ(seen["daemon"], holder) << seen.dump();
  // Asking changed nothing: no choice was counted.
  EXPECT_EQ(second.fleet()["choices"]["prefix"], 0);
}

// Prompts that begin with what every daemon holds (a shared system prompt,
// a shared preamble) are new prompts all the same: they spread over the
// daemons by what follows it, rather than all going to one by their first
// block.
TEST_F(RouterTest, PromptsThatBeginWithWhatEveryDaemonHoldsSpreadByWhatFollows) {
  // Both hold kPrompt; a few passes each settle their measured costs.
  for (Daemon* d : {&a_, &b_}) {
    auto direct = d->connect();
    for (int i = 0; i < 6; ++i)
      ASSERT_TRUE(
          generate(*direct, 1, {{"prompt", kPrompt + std::string(i, '!')}, {"max_tokens", 4}})
              .contains("result"));
  }
  auto c = router_->connect();
  // Once the router's index has both daemons holding kPrompt, and its
  // polled stats have both idle (the last direct request may still count).
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  for (bool both = false; !both && std::chrono::steady_clock::now() < deadline;) {
    const json r = route(*c, kPrompt);
    both = r.is_object() && r["daemons"].size() == 2u;
    for (const json& d : both ? r["daemons"] : json::array())
      both = both && d["held_blocks"]["l1"].get<int>() > 0 && d["backlog_rows"] == 0;
    if (!both) std::this_thread::sleep_for(10ms);
  }
  std::set<std::string> chosen;
  json last;
  for (int i = 0; i < 16; ++i) {
    // Within the page after kPrompt's last full block: the affinity's page.
    last = route(*c, kPrompt + std::to_string(i) + " more came.");
    ASSERT_TRUE(last.is_object());
    EXPECT_EQ(last["reason"], "prefix") << last.dump();
    chosen.insert(last["daemon"].get<std::string>());
  }
  // Daemons of one kind are weighed by one curve, the median of what each
  // measured of itself, so two idle ones that both hold the prefix in L1
  // tie exactly (by their own curves they came out up to 11x apart on a
  // busy machine, and the cheaper took every prompt). The tail after the
  // prefix is prefilled on that curve: a cost above 0 says the router
  // weighs the daemons by the figures they told, not by none.
  EXPECT_EQ(last["daemons"][0]["expected_us"], last["daemons"][1]["expected_us"]) << last.dump();
  EXPECT_GT(last["daemons"][0]["expected_us"].get<double>(), 0.0) << last.dump();
  EXPECT_EQ(chosen.size(), 2u) << "16 prompts after a prefix both daemons hold all went to one: "
                               << last.dump();
}

TEST_F(RouterTest, StreamsUnderTheRoutersRequestIdAndCancelsByIt) {
  auto c = router_->connect();
  ASSERT_TRUE(c->valid());
  ASSERT_TRUE(c->send(
      request(7, "generate",
              {{"prompt", kPrompt}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}})));
  auto note = c->read();
  ASSERT_TRUE(note.has_value());
  ASSERT_EQ((*note)["method"], "generate.token") << note->dump();
  EXPECT_EQ((*note)["params"]["rpc_id"], 7);
  const json id = (*note)["params"]["id"];
  // Another client (same uid) may cancel it by the router's id.
  auto other = router_->connect();
  auto cancelled = other->call(request(8, "cancel", {{"id", id}}));
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ((*cancelled)["result"]["cancelled"], id) << cancelled->dump();
  for (;;) {
    auto msg = c->read();
    ASSERT_TRUE(msg.has_value());
    if (!msg->contains("id")) {
      EXPECT_EQ((*msg)["params"]["id"], id);
      continue;
    }
    EXPECT_EQ((*msg)["id"], 7);
    EXPECT_EQ((*msg)["result"]["finish_reason"], "cancelled") << msg->dump();
    EXPECT_EQ((*msg)["result"]["id"], id);
    break;
  }
  auto unknown = other->call(request(9, "cancel", {{"id", 987654}}));
  EXPECT_EQ((*unknown)["error"]["code"], -32602);
}

TEST_F(RouterTest, RefusesWhatADaemonRefusesTheSameWay) {
  auto via_router = router_->connect();
  auto direct = a_.connect();
  for (
      const std::string& line :
      {std::string(
           R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"x","max_tokens":0}})"),
       std::string(
           R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"x","tokens":[1]}})"),
       std::string(
           R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"prompt":"x","bogus":1}})"),
       std::string(R"({"jsonrpc":"2.0","id":1,"method":"generate","params":{"tokens":[99999]}})"),
       std::string(R"({"jsonrpc":"2.0","id":1,"method":"cache.lookup","params":{}})"),
       std::string(R"({"jsonrpc":"2.0","id":1,"method":"no.such"})"), std::string("{not json"),
       std::string(R"([1,2])")}) {
    ASSERT_TRUE(via_router->send_raw(line + "\n"));
    ASSERT_TRUE(direct->send_raw(line + "\n"));
    const auto r = via_router->read();
    const auto d = direct->read();
    ASSERT_TRUE(r && d) << line;
    EXPECT_EQ((*r)["error"]["code"], (*d)["error"]["code"]) << line;
    EXPECT_EQ((*r)["error"]["message"], (*d)["error"]["message"]) << line;
    EXPECT_EQ((*r)["id"], (*d)["id"]) << line;
  }
  // A daemon's own method is not the router's.
  auto stats = via_router->call(request(2, "stats"));
  EXPECT_EQ((*stats)["error"]["code"], -32601);
  auto help = via_router->call(request(4, "help"));
  ASSERT_TRUE(help.has_value());
  std::vector<std::string> names;
  for (const json& m : (*help)["result"]["methods"]) names.push_back(m["name"]);
  for (const char* name : {"generate", "cancel", "fleet", "fleet.route", "shutdown"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  auto health = via_router->call(request(3, "health"));
  EXPECT_EQ((*health)["result"]["status"], "ok");
  EXPECT_EQ((*health)["result"]["router"]["usable"], 2);
}

TEST_F(RouterTest, ADaemonThatDiesIsTakenOutAndComesBack) {
  auto c = router_->connect();
  const json params = {{"prompt", kPrompt}, {"max_tokens", 8}, {"seed", 9}};
  const json before = generate(*c, 1, params);
  ASSERT_TRUE(before.contains("result")) << before.dump();

  // A stopped daemon answers nothing: out within a second of its last poll.
  ASSERT_EQ(::kill(a_.pid(), SIGSTOP), 0);
  ASSERT_TRUE(router_->wait_usable(0, false)) << router_->log();
  EXPECT_TRUE(test_util::contains(router_->fleet()["daemons"][0]["last_error"].get<std::string>(),
                                  "no answer"));
  ASSERT_EQ(::kill(a_.pid(), SIGCONT), 0);
  ASSERT_TRUE(router_->wait_usable(0, true)) << router_->log();

  // Killed: every request goes to the other, with the same tokens.
  ASSERT_EQ(::kill(a_.pid(), SIGKILL), 0);
  a_.wait_exit();
  ASSERT_TRUE(router_->wait_usable(0, false)) << router_->log();
  for (int i = 0; i < 3; ++i) {
    const json r = generate(*c, 10 + i, params);
    ASSERT_TRUE(r.contains("result")) << r.dump();
    EXPECT_EQ(r["result"]["tokens"], before["result"]["tokens"]);
  }
  // A daemon on the same socket again: back in use.
  Daemon again({"--socket", a_.socket_path()});
  ASSERT_TRUE(again.wait_ready()) << again.log();
  ASSERT_TRUE(router_->wait_usable(0, true)) << router_->log();
  EXPECT_GE(router_->fleet()["daemons"][0]["downs"].get<int>(), 2);

  // With every daemon gone, a clear error.
  ASSERT_EQ(::kill(again.pid(), SIGKILL), 0);
  ASSERT_EQ(::kill(b_.pid(), SIGKILL), 0);
  ASSERT_TRUE(router_->wait_usable(0, false));
  ASSERT_TRUE(router_->wait_usable(1, false));
  const json none = generate(*c, 20, params);
  EXPECT_EQ(none["error"]["code"], -32010) << none.dump();
  auto health = c->call(request(21, "health"));
  EXPECT_EQ((*health)["result"]["status"], "unavailable");
}

TEST_F(RouterTest, ARequestOnADaemonThatDiesBeforeAnsweringIsSentToAnother) {
  auto c = router_->connect();
  const json params = {{"prompt", kPrompt}, {"max_tokens", 8}, {"seed", 3}};
  const json warm = generate(*c, 1, params);
  ASSERT_TRUE(warm.contains("result")) << warm.dump();
  // The holder stops; the repeat is sent to it (the router has not noticed
  // yet, or it has and sends it to the other); then the holder dies.
  const json fleet = router_->fleet();
  const int holder = fleet["daemons"][0]["blocks"]["l1"].get<int>() > 0 ? 0 : 1;
  Daemon& d = holder == 0 ? a_ : b_;
  ASSERT_EQ(::kill(d.pid(), SIGSTOP), 0);
  ASSERT_TRUE(c->send(request(2, "generate", params)));
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(::kill(d.pid(), SIGKILL), 0);
  auto r = c->read();
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->contains("result")) << r->dump();
  EXPECT_EQ((*r)["id"], 2);
  EXPECT_EQ((*r)["result"]["tokens"], warm["result"]["tokens"]);
  // Which path it took depends on timing; say which.
  RecordProperty("retried", router_->fleet()["choices"]["retried"].dump());
}

// Daemons at tcp:// addresses (their TCP listeners, with an API key): the
// router authenticates, subscribes and routes as on Unix sockets, over
// JSON-RPC and HTTP; a router with the wrong key uses none of them.
TEST(RouterTcpTest, DaemonsAtTcpAddressesWithAKey) {
  test_util::TempDir dir;
  const std::filesystem::path key = dir.path() / "key";
  std::ofstream(key) << "0123456789abcdef0123\n";
  std::filesystem::permissions(
      key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const int pa = test_util::free_tcp_port();
  Daemon a(
      {"--http-listen", "127.0.0.1:" + std::to_string(pa), "--http-api-key-file", key.string()});
  const int pb = test_util::free_tcp_port();
  Daemon b(
      {"--http-listen", "127.0.0.1:" + std::to_string(pb), "--http-api-key-file", key.string()});
  for (Daemon* d : {&a, &b}) ASSERT_TRUE(d->wait_ready()) << d->log();
  const std::vector<std::string> addresses = {"tcp://127.0.0.1:" + std::to_string(pa),
                                              "tcp://127.0.0.1:" + std::to_string(pb)};
  RouterProcess router(addresses, {"--daemon-api-key-file", key.string()});
  ASSERT_TRUE(router.wait_usable(0, true)) << router.log();
  ASSERT_TRUE(router.wait_usable(1, true)) << router.log();

  auto c = router.connect();
  const json params = {{"prompt", kPrompt}, {"max_tokens", 8}, {"seed", 4}};
  const json first = generate(*c, 1, params);
  ASSERT_TRUE(first.contains("result")) << first.dump() << router.log();
  // Once the holder's events have come over TCP, the repeat goes there.
  router.wait_for(0, [&](const json&) {
    const json fleet = router.fleet();
    for (const json& d : fleet["daemons"])
      if (d["blocks"]["l1"].get<int>() > 0) return true;
    return false;
  });
  const json second = generate(*c, 2, params);
  ASSERT_TRUE(second.contains("result")) << second.dump();
  EXPECT_EQ(second["result"]["tokens"], first["result"]["tokens"]);
  EXPECT_GT(second["result"]["cached_tokens"]["l1"].get<int>(), 0) << second.dump();

  if (test_util::on_path("curl")) {  // HTTP to a TCP daemon carries the key
    const test_util::CommandResult http = test_util::run_command(
        "curl -s -w '\\n%{http_code}' --unix-socket '" + router.socket_path() +
        "' http://localhost/v1/completions -H 'Content-Type: application/json' -d "
        "'{\"prompt\": \"Q: Why\", \"max_tokens\": 2}'");
    EXPECT_TRUE(test_util::contains(http.output, "\n200")) << http.output;
  }

  // The wrong key: both daemons refuse it, and the router says so.
  const std::filesystem::path wrong = dir.path() / "wrong";
  std::ofstream(wrong) << "wrong-key-0123456789\n";
  std::filesystem::permissions(
      wrong, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  RouterProcess refused(addresses, {"--daemon-api-key-file", wrong.string()});
  const json d0 = refused.wait_for(0, [](const json& d) {
    return test_util::contains(d["last_error"].get<std::string>(), "auth").operator bool();
  });
  EXPECT_EQ(d0["usable"], false) << d0.dump();
  EXPECT_TRUE(test_util::contains(d0["last_error"].get<std::string>(), "wrong API key"))
      << d0.dump();
}

// The router runs no model: it links a model family's front half (config,
// tokenizer, block keys), not the engine, its kernels or the tiers' stores.
TEST(RouterBuildTest, LinksTheModelsFrontHalfNotTheEngineOrTheStores) {
  if (!test_util::on_path("ldd")) GTEST_SKIP() << "ldd is not installed";
  const test_util::CommandResult ldd =
      test_util::run_command(std::string("ldd '") + KVTIER_ROUTER_PATH + "' 2>&1");
  ASSERT_EQ(ldd.status, 0) << ldd.output;
  for (const char* library : {"librocksdb", "libhiredis", "liburing", "libgomp", "libopenblas"})
    EXPECT_EQ(ldd.output.find(library), std::string::npos) << library << " in\n" << ldd.output;
  EXPECT_NE(ldd.output.find("libpcre2"), std::string::npos)  // the tokenizers: linked at all
      << ldd.output;
}

}  // namespace
}  // namespace kvtier::daemon_test
