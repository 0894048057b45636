// kvtier-router's HTTP front door, black-box: real curl against a real
// router in front of real kvtierd daemons. Answers are compared with the
// daemons' own answers to the same requests, byte for byte where the
// answer does not carry a time or an id; refusals must match a daemon's
// exactly; the router's /health, /metrics and TCP listener with its API key
// are its own.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "http_test_util.h"
#include "router_test_util.h"
#include "wire/protocol.h"

namespace kvtier::daemon_test {
namespace {

namespace rpc_code = kvtier::wire::rpc_code;

using test_util::HttpAnswer;

const std::string kPrompt =
    "Q: What is the meaning of life and everything in the universe? A: It is " +
    std::string("forty-two, of course, and a towel. ");

HttpAnswer curl(const RouterProcess& r, const std::string& method, const std::string& path,
                const std::optional<json>& body = std::nullopt, const std::string& extra = "") {
  return test_util::curl(r.socket_path(), r.dir(), method, path, body, extra);
}
HttpAnswer curl(const Daemon& d, const std::string& method, const std::string& path,
                const std::optional<json>& body = std::nullopt, const std::string& extra = "") {
  return test_util::curl(d.socket_path(), d.dir(), method, path, body, extra);
}

// What an answer says, without what differs between any two answers (its
// id, its creation time, the seed a daemon drew for it) or between daemons
// (the cached tokens, which depend on where the prefix was).
json comparable(json answer) {
  for (const char* field : {"id", "created", "seed", "usage"}) answer.erase(field);
  return answer;
}

class RouterHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test_util::on_path("curl"))
      GTEST_SKIP() << "curl is not installed (scripts/install-deps.sh installs it)";
    for (auto* d : {&a_, &b_}) ASSERT_TRUE(d->wait_ready()) << d->log();
  }
  std::unique_ptr<RouterProcess> start_router(const std::vector<std::string>& extra = {}) {
    auto r = std::make_unique<RouterProcess>(
        std::vector<std::string>{a_.socket_path(), b_.socket_path()}, extra);
    EXPECT_TRUE(r->wait_usable(0, true)) << r->log();
    EXPECT_TRUE(r->wait_usable(1, true)) << r->log();
    return r;
  }
  // Waits until some daemon's index holds a block in L1 and no daemon has
  // a request pending by the router's count (its polled stats lag the
  // answer, and a pending request there would weigh against it).
  static void wait_indexed(const RouterProcess& r) {
    const auto deadline = std::chrono::steady_clock::now() + kTimeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const json fleet = r.fleet();  // named: a temporary's ["daemons"] would dangle
      bool held = false, idle = true;
      for (const json& d : fleet["daemons"]) {
        held = held || d["blocks"]["l1"].get<int>() > 0;
        idle = idle && d["pending"].get<int>() == 0;
      }
      if (held && idle) return;
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "no daemon's blocks reached the router\n" << r.log();
  }

  Daemon a_, b_;
};

TEST_F(RouterHttpTest, AnswersComeBackAsTheDaemonWroteThemAndARepeatGoesToItsPrefix) {
  auto r = start_router();
  const json body = {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}};
  const HttpAnswer first = curl(*r, "POST", "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  wait_indexed(*r);
  const HttpAnswer second = curl(*r, "POST", "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  // The repeat went where the prompt's blocks were, and found them in L1.
  EXPECT_GT(second.doc()["usage"]["kvtier_cached_tokens"]["l1"].get<int>(), 0) << second.body;
  EXPECT_EQ(comparable(second.doc()), comparable(first.doc()));
  for (Daemon* d : {&a_, &b_}) {
    const HttpAnswer direct = curl(*d, "POST", "/v1/completions", body);
    ASSERT_EQ(direct.status, 200) << direct.body;
    EXPECT_EQ(comparable(direct.doc()), comparable(first.doc()));
  }

  // Streamed: the same text, event by event, ending in [DONE].
  json streamed = body;
  streamed["stream"] = true;
  const HttpAnswer s = curl(*r, "POST", "/v1/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  const std::vector<json> events = test_util::sse_events(s.body);
  ASSERT_GE(events.size(), 2u) << s.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i)
    text += events[i]["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, first.doc()["choices"][0]["text"]);

  // Chat, rendered by the same template on both sides.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "What is a towel for?"}}}},
                     {"max_tokens", 8},
                     {"temperature", 0}};
  const HttpAnswer via = curl(*r, "POST", "/v1/chat/completions", chat);
  const HttpAnswer direct = curl(a_, "POST", "/v1/chat/completions", chat);
  ASSERT_EQ(via.status, 200) << via.body;
  ASSERT_EQ(direct.status, 200) << direct.body;
  EXPECT_EQ(comparable(via.doc()), comparable(direct.doc()));

  // The models list is a daemon's.
  const HttpAnswer models = curl(*r, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  json m = models.doc(), dm = curl(a_, "GET", "/v1/models").doc();
  m["data"][0].erase("created");
  dm["data"][0].erase("created");
  EXPECT_EQ(m, dm);

  // The router's own figures: four generations routed, one by its prefix.
  const HttpAnswer metrics = curl(*r, "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  const std::string& t = metrics.body;
  EXPECT_EQ(test_util::metric(t, "kvtier_router_choices_total{reason=\"prefix\"}") +
                test_util::metric(t, "kvtier_router_choices_total{reason=\"load\"}") +
                test_util::metric(t, "kvtier_router_choices_total{reason=\"cold\"}"),
            4)
      << t;
  EXPECT_GE(test_util::metric(t, "kvtier_router_choices_total{reason=\"prefix\"}"), 1) << t;
  EXPECT_GT(test_util::metric(t, "kvtier_router_cached_tokens_total{tier=\"l1\"}"), 0) << t;
  EXPECT_EQ(test_util::metric(
                t, "kvtier_router_http_responses_total{route=\"/v1/completions\",code=\"200\"}"),
            3)
      << t;
  EXPECT_EQ(
      test_util::metric(t, "kvtier_router_daemon_usable{daemon=\"" + a_.socket_path() + "\"}"), 1)
      << t;
  if (!test_util::on_path("promtool"))
    GTEST_SKIP() << "promtool is not installed (Debian's prometheus package; "
                    "scripts/install-deps.sh installs it): the format was not checked";
  const test_util::CommandResult check = test_util::promtool_check(t, r->dir());
  EXPECT_EQ(check.status, 0) << check.output;
  EXPECT_EQ(check.output, "") << "promtool's lint";
}

TEST_F(RouterHttpTest, RefusesWhatADaemonRefusesTheSameWay) {
  auto r = start_router();
  struct Bad {
    const char* method;
    const char* path;
    std::optional<json> body;
    const char* extra;
  };
  const std::vector<Bad> bad = {
      {"POST", "/v1/completions", json{{"prompt", "x"}, {"bogus", 1}}, ""},
      {"POST", "/v1/completions", json{{"prompt", "x"}, {"model", "another"}}, ""},
      {"POST", "/v1/completions", json{{"prompt", "x"}, {"temperature", -1}}, ""},
      {"POST", "/v1/completions", json{{"max_tokens", 3}}, ""},
      {"POST", "/v1/chat/completions", json{{"messages", "hello"}}, ""},
      {"POST", "/v1/completions", std::nullopt,
       "-H 'Content-Type: application/json' --data-binary '{\"prompt\": '"},
      {"GET", "/v1/completions", std::nullopt, ""},
      {"GET", "/v1/nothing", std::nullopt, ""},
  };
  for (const Bad& b : bad) {
    const HttpAnswer via = curl(*r, b.method, b.path, b.body, b.extra);
    const HttpAnswer direct = curl(a_, b.method, b.path, b.body, b.extra);
    EXPECT_GE(via.status, 400) << b.path << " " << (b.body ? b.body->dump() : b.extra);
    EXPECT_EQ(via.status, direct.status) << via.body;
    EXPECT_EQ(via.body, direct.body);
  }
  // Nothing of it reached a daemon.
  const HttpAnswer metrics = curl(*r, "GET", "/metrics");
  EXPECT_EQ(test_util::metric(metrics.body, "kvtier_router_choices_total{reason=\"cold\"}"), 0);
}

TEST_F(RouterHttpTest, ARequestWhoseDaemonDiesBeforeAnsweringIsSentToAnother) {
  auto r = start_router();
  const json body = {{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 0}};
  const HttpAnswer warm = curl(*r, "POST", "/v1/completions", body);
  ASSERT_EQ(warm.status, 200) << warm.body;
  wait_indexed(*r);
  const json fleet = r->fleet();
  const int holder = fleet["daemons"][0]["blocks"]["l1"].get<int>() > 0 ? 0 : 1;
  Daemon& d = holder == 0 ? a_ : b_;
  // The holder stops, the repeat is sent to it, then the holder dies.
  ASSERT_EQ(::kill(d.pid(), SIGSTOP), 0);
  HttpAnswer again;
  std::thread client([&] { again = curl(*r, "POST", "/v1/completions", body); });
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(::kill(d.pid(), SIGKILL), 0);
  client.join();
  ASSERT_EQ(again.status, 200) << again.body << "\n" << r->log();
  EXPECT_EQ(comparable(again.doc()), comparable(warm.doc()));
}

TEST_F(RouterHttpTest, WithNoDaemonUsableHealthAndRequestsAre503) {
  RouterProcess r({(a_.dir() / "nobody-listens.sock").string()});
  ASSERT_TRUE(r.poll(0, [](const json& d) { return !d["last_error"].get<std::string>().empty(); }))
      << r.log();
  const HttpAnswer health = curl(r, "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.doc()["status"], "unavailable") << health.body;
  const HttpAnswer gen =
      curl(r, "POST", "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}});
  EXPECT_EQ(gen.status, 503);
  EXPECT_TRUE(
      test_util::contains(gen.doc()["error"]["message"].get<std::string>(), "no daemon is usable"))
      << gen.body;
}

TEST_F(RouterHttpTest, OnTcpBeyondLoopbackAKeyIsRequiredAndChecked) {
  test_util::TempDir dir;
  const std::string port = std::to_string(test_util::free_tcp_port());
  // Every interface, no key: refused at start.
  const ProcessResult open = run_process(
      {KVTIER_ROUTER_PATH, "--socket", (dir.path() / "r.sock").string(), "--model",
       kModelDir.string(), "--daemon", a_.socket_path(), "--http-listen", "0.0.0.0:" + port},
      dir.path());
  EXPECT_NE(open.exit_code, 0);
  EXPECT_TRUE(test_util::contains(open.err, "http_api_key_file")) << open.err;

  const std::filesystem::path key = dir.path() / "key";
  std::ofstream(key) << "0123456789abcdef0123\n";
  std::filesystem::permissions(
      key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto r = start_router({"--http-listen", "0.0.0.0:" + port, "--http-api-key-file", key.string(),
                         "--http-timeout", "2"});
  auto idle = Client::tcp(std::stoi(port));  // never authenticates
  const auto tcp = [&](const std::string& path, const std::string& extra) {
    return test_util::curl("", dir.path(), "GET", path, std::nullopt, extra, std::stoi(port))
        .status;
  };
  EXPECT_EQ(tcp("/v1/models", ""), 401);
  EXPECT_EQ(tcp("/v1/models", "-H 'Authorization: Bearer wrong-key-0123456789'"), 401);
  EXPECT_EQ(tcp("/v1/models", "-H 'Authorization: Bearer 0123456789abcdef0123'"), 200);
  EXPECT_EQ(tcp("/health", ""), 200);  // for load balancers
  EXPECT_EQ(tcp("/metrics", ""), 401);
  // The socket is guarded by its file mode, not the key.
  EXPECT_EQ(curl(*r, "GET", "/v1/models").status, 200);

  // JSON-RPC on the same port: `auth` first, as on kvtierd; never privileged.
  auto c = Client::tcp(std::stoi(port));
  ASSERT_TRUE(c && c->valid());
  const auto code = [](const std::optional<json>& a) {
    return a && a->contains("error") ? (*a)["error"].value("code", 0) : 0;
  };
  EXPECT_EQ(code(c->call(request(1, "fleet"))), rpc_code::kUnauthenticated);
  EXPECT_EQ(code(c->call(request(2, "auth", {{"api_key", "wrong-key-0123456789"}}))),
            rpc_code::kUnauthenticated);
  const auto ok = c->call(request(3, "auth", {{"api_key", "0123456789abcdef0123"}}));
  ASSERT_TRUE(ok && ok->contains("result")) << (ok ? ok->dump() : "no answer");
  const auto health = c->call(request(4, "health"));
  ASSERT_TRUE(health && health->contains("result"));
  EXPECT_EQ((*health)["result"]["status"], "ok");
  EXPECT_EQ(code(c->call(request(5, "shutdown"))), rpc_code::kPermissionDenied);
  // One that never gave the key is closed after --http-timeout.
  ASSERT_TRUE(idle && idle->valid());
  EXPECT_FALSE(idle->read().has_value()) << "the unauthenticated connection stayed open";
}

}  // namespace
}  // namespace kvtier::daemon_test
