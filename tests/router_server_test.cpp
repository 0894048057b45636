// kvtier-router's signals and stop, black-box, as kvtierd takes them
// (router_server.h): SIGTERM drains (new requests refused, those in flight
// answered whole) and exits 0; a second SIGTERM ends the drain, and the
// requests still on a daemon get their end from the router while the
// daemon cancels them; SIGHUP changes nothing and kills nothing; `shutdown`
// and `health` as kvtierctl shows them.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "router_test_util.h"

namespace kvtier::daemon_test {
namespace {

namespace fs = std::filesystem;

using daemon_test::kCtlPath;

constexpr int kLongTokens = 250;

json long_generate(bool stream = true) {
  return generate_params("Q:", kLongTokens, 0.8f, 5, stream);
}

// Reads generate.token notifications until `generate`'s answer (id `id`)
// comes; nullopt on EOF or timeout.
std::optional<json> answer(Client& c, int id) {
  for (;;) {
    auto msg = c.read();
    if (!msg) return std::nullopt;
    if (msg->contains("id") && (*msg)["id"] == id) return msg;
  }
}

// Waits until the router has removed its socket file: the drain has begun.
bool wait_socket_gone(const RouterProcess& r) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!fs::exists(r.socket_path())) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// An HTTP request written raw on `c`, and what comes back until `until`
// shows (or the connection ends).
std::string http(Client& c, const std::string& method, const std::string& path,
                 const std::string& body, const std::string& until) {
  EXPECT_TRUE(c.send_raw(method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
  std::string got;
  while (got.find(until) == std::string::npos) {
    auto more = c.read_raw();
    if (!more) break;
    got += *more;
  }
  return got;
}

TEST(RouterServerTest, SigtermDrainsRequestsInFlightThenExitsZero) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  RouterProcess r({d.socket_path()}, {"--drain-timeout", "60", "--log-level", "info"});
  ASSERT_TRUE(r.wait_usable(0, true)) << r.log();

  Client running(r.socket_path()), idle(r.socket_path()), web(r.socket_path());
  ASSERT_TRUE(running.send(request(1, "generate", long_generate())));
  ASSERT_TRUE(running.read().has_value());  // its first token
  {
    // The daemon holds the request mid-generation while the router drains.
    const Stopped stopped(d.pid());
    ASSERT_EQ(::kill(r.pid(), SIGTERM), 0);
    ASSERT_TRUE(wait_socket_gone(r)) << r.log();
    EXPECT_FALSE(Client(r.socket_path()).valid());

    // Open connections still work; new requests are refused as a draining
    // kvtierd refuses them.
    auto refused = idle.call(request(2, "generate", long_generate(false)));
    EXPECT_EQ(error_code(refused), -32002) << (refused ? refused->dump() : "no answer");
    auto health = idle.call(request(3, "health"));
    ASSERT_TRUE(health && health->contains("result"));
    EXPECT_EQ((*health)["result"]["status"], "draining");
    const std::string web_refused =
        http(web, "POST", "/v1/completions", json{{"prompt", "Q:"}}.dump(), "}");
    EXPECT_TRUE(web_refused.starts_with("HTTP/1.1 503")) << web_refused;
    EXPECT_TRUE(test_util::contains(web_refused, "shutting down"));
    EXPECT_FALSE(r.exit_status().has_value()) << "the router did not wait for its request";
  }
  // The daemon goes on: the request in flight is answered whole.
  auto done = answer(running, 1);
  ASSERT_TRUE(done && done->contains("result")) << (done ? done->dump() : "no answer") << r.log();
  EXPECT_EQ((*done)["result"]["finish_reason"], "length");
  EXPECT_EQ((*done)["result"]["tokens"].size(), static_cast<std::size_t>(kLongTokens));
  const auto status = r.exit_status(kTimeout);
  ASSERT_TRUE(status.has_value()) << r.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << r.log();
  EXPECT_TRUE(test_util::contains(r.log(), "stopping: every request finished")) << r.log();
}

TEST(RouterServerTest, ASecondSigtermEndsTheDrainAndTheRouterAnswersWhatWasLeft) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  RouterProcess r({d.socket_path()}, {"--drain-timeout", "60"});
  ASSERT_TRUE(r.wait_usable(0, true)) << r.log();

  Client rpc(r.socket_path()), web(r.socket_path());
  ASSERT_TRUE(rpc.send(request(1, "generate", long_generate())));
  ASSERT_TRUE(rpc.read().has_value());
  const std::string begun =
      http(web, "POST", "/v1/completions",
           json{{"prompt", "Q:"}, {"max_tokens", kLongTokens}, {"stream", true}}.dump(), "data: {");
  ASSERT_TRUE(test_util::contains(begun, "data: {")) << begun;
  {
    const Stopped stopped(d.pid());
    ASSERT_EQ(::kill(r.pid(), SIGTERM), 0);
    ASSERT_TRUE(wait_socket_gone(r)) << r.log();
    ASSERT_EQ(::kill(r.pid(), SIGTERM), 0);
    const auto status = r.exit_status(kTimeout);
    ASSERT_TRUE(status.has_value()) << r.log();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << r.log();
    EXPECT_TRUE(test_util::contains(r.log(), "a second SIGINT/SIGTERM ended the drain")) << r.log();
  }
  // Each client got an end from the router, not just a closed connection.
  auto left = answer(rpc, 1);
  EXPECT_EQ(error_code(left), -32002) << (left ? left->dump() : "no answer");
  std::string rest;
  while (auto more = web.read_raw(5s)) rest += *more;
  EXPECT_TRUE(test_util::contains(rest, "data: {\"error\"")) << rest;
  EXPECT_TRUE(test_util::contains(rest, "0\r\n\r\n")) << "the stream was not ended: " << rest;
  // The daemon, going on, finds both connections gone and cancels both.
  const json idle = wait_idle(d);
  EXPECT_EQ(idle["requests_cancelled"], 2) << idle.dump();
}

TEST(RouterServerTest, SighupChangesNothingAndTheRouterGoesOn) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  RouterProcess r({d.socket_path()});
  ASSERT_TRUE(r.wait_usable(0, true)) << r.log();
  ASSERT_EQ(::kill(r.pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!test_util::contains(r.log(), "SIGHUP") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(test_util::contains(r.log(), "SIGHUP: kvtier-router has no config file")) << r.log();
  EXPECT_FALSE(r.exit_status().has_value());
  auto c = r.connect();
  auto out = c->call(request(1, "generate", generate_params("Q:", 8, 0, 1)));
  ASSERT_TRUE(out && out->contains("result")) << r.log();
}

TEST(RouterServerTest, KvtierctlSaysTheRouterStopsAndHealthFailsWithoutADaemon) {
  ASSERT_TRUE(fs::exists(kCtlPath)) << kCtlPath;
  test_util::TempDir dir;
  RouterProcess r({(dir.path() / "nobody-listens.sock").string()});
  ASSERT_TRUE(r.wait_usable(0, false)) << r.log();
  const auto health = run_process({kCtlPath, "-s", r.socket_path(), "health"}, dir.path());
  EXPECT_EQ(health.exit_code, 5) << health.out << health.err;
  EXPECT_TRUE(health.out.starts_with("unavailable")) << health.out;
  const auto stop = run_process({kCtlPath, "-s", r.socket_path(), "shutdown"}, dir.path());
  EXPECT_EQ(stop.exit_code, 0) << stop.err;
  EXPECT_EQ(stop.out, "kvtier-router is stopping\n");
  const auto status = r.exit_status(kTimeout);
  ASSERT_TRUE(status.has_value()) << r.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status << "\n" << r.log();
}

}  // namespace
}  // namespace kvtier::daemon_test
