// Clients that leave at every stage of a request, on kvtierd and on
// kvtier-router alike, over JSON-RPC and HTTP:
//  - before the daemon answers (the daemon stopped with SIGSTOP while the
//    request waits for it),
//  - mid-stream (after the first token),
//  - right after the last token,
//  - and on the router, while a request is retried on a second daemon (the
//    first, a scripted one, refuses it as full), before that daemon answers
//    and mid-stream.
// Each time the server must live on (it answers), a generation still
// running must be cancelled where it runs, and every count of the request
// must come back to zero: the daemon's pending requests and KV blocks in
// use, the router's requests in flight. The router once died here: an HTTP
// client that left made it walk a set its own cancel erased from.
#include <gtest/gtest.h>
#include <signal.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "daemon_test_util.h"
#include "router_test_util.h"
#include "scripted_daemon.h"

namespace kvtier::daemon_test {
namespace {

enum class Door { kJsonRpc, kHttp };

// Long enough to be running still when the client leaves after the first
// token: 250 tokens take the bundled model about 90 ms here, and the daemon
// is stopped (SIGSTOP) as soon as the first one has come, so it cannot
// finish them while the client leaves.
constexpr int kLongTokens = 250;
constexpr int kShortTokens = 12;

// One streamed generation on a fresh connection to `socket`.
class Streamed {
 public:
  Streamed(const std::string& socket, Door door, int max_tokens)
      : client_(socket), door_(door), max_tokens_(max_tokens) {
    EXPECT_TRUE(client_.valid()) << socket;
    const json params = {{"prompt", "Q:"},
                         {"max_tokens", max_tokens},
                         {"temperature", 0.8},
                         {"seed", 7},
                         {"stream", true}};
    if (door == Door::kJsonRpc) {
      EXPECT_TRUE(client_.send(request(1, "generate", params)));
    } else {
      const std::string body = params.dump();
      EXPECT_TRUE(client_.send_raw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n" + body));
    }
  }

  // Reads until the first token has come; false on EOF or timeout.
  bool first_token() {
    return read_until([&] { return tokens_ > 0; });
  }
  // Reads until the last token has come (and nothing after it that need
  // not: JSON-RPC's answer line, HTTP's end of the chunked body).
  bool last_token() {
    return read_until([&] { return door_ == Door::kJsonRpc ? tokens_ >= max_tokens_ : done_; });
  }
  void leave() { client_.close(); }

 private:
  bool read_until(const std::function<bool()>& enough) {
    while (!enough()) {
      if (door_ == Door::kJsonRpc) {
        auto msg = client_.read();
        if (!msg) return false;
        if (msg->contains("id")) return enough();  // the answer: nothing more comes
        tokens_ += static_cast<int>((*msg)["params"]["tokens"].size());
      } else {
        auto bytes = client_.read_raw();
        if (!bytes) return false;
        seen_ += *bytes;
        // An event per token batch: one is enough to know the first came.
        tokens_ = seen_.find("data: {") != std::string::npos ? 1 : 0;
        done_ = seen_.find("data: [DONE]") != std::string::npos;
      }
    }
    return true;
  }

  Client client_;
  Door door_;
  int max_tokens_;
  int tokens_ = 0;
  bool done_ = false;
  std::string seen_;
};

long cancelled(const json& stats) { return stats.value("requests_cancelled", 0L); }

// Waits until the router counts no request in flight (its own ids, and
// every daemon's pending as it sees them) and daemon `usable` is in use
// again; false (with the router's log) when it never does or the router
// stopped answering.
::testing::AssertionResult router_settled(RouterProcess& r, std::size_t usable) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  json fleet;
  while (std::chrono::steady_clock::now() < deadline) {
    if (const auto status = r.exit_status())
      return ::testing::AssertionFailure() << "the router died (wait status " << *status << ")\n"
                                           << r.log();
    fleet = r.fleet();
    if (fleet.is_object()) {
      bool idle = fleet["requests"] == 0 && fleet["daemons"][usable]["usable"] == true;
      for (const json& d : fleet["daemons"]) idle = idle && d["pending"] == 0;
      if (idle) return ::testing::AssertionSuccess();
    }
    std::this_thread::sleep_for(10ms);
  }
  return ::testing::AssertionFailure()
         << (fleet.is_null() ? "the router stopped answering"
                             : "the router did not settle: " + fleet.dump())
         << "\n"
         << r.log();
}

const char* name(Door door) { return door == Door::kJsonRpc ? "JSON-RPC" : "HTTP"; }

// The three stages on `socket`, kvtierd's own or a router's in front of
// `daemon`; `settled` checks the server after each (a fatal failure there
// ends the test: the server is gone).
void leave_at_every_stage(const std::string& socket, Door door, Daemon& daemon,
                          const std::function<void()>& settled) {
  {
    SCOPED_TRACE(std::string(name(door)) + ": before the daemon answers");
    {
      const Stopped stopped(daemon.pid());
      Streamed s(socket, door, kLongTokens);
      std::this_thread::sleep_for(100ms);  // on its way, at most; the daemon cannot answer
      s.leave();
    }
    settled();
    if (::testing::Test::HasFatalFailure()) return;
    wait_idle(daemon);
  }
  {
    SCOPED_TRACE(std::string(name(door)) + ": mid-stream");
    const long before = cancelled(wait_idle(daemon));
    Streamed s(socket, door, kLongTokens);
    {
      ASSERT_TRUE(s.first_token()) << daemon.log();
      const Stopped stopped(daemon.pid());
      s.leave();
    }
    settled();
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(cancelled(wait_idle(daemon)), before + 1);
  }
  {
    SCOPED_TRACE(std::string(name(door)) + ": right after the last token");
    Streamed s(socket, door, kShortTokens);
    ASSERT_TRUE(s.last_token()) << daemon.log();
    s.leave();
    settled();
    if (::testing::Test::HasFatalFailure()) return;
    wait_idle(daemon);
  }
}

class ClientLeavesTest : public ::testing::TestWithParam<Door> {};

TEST_P(ClientLeavesTest, KvtierdLivesOnAndCancelsWhatRuns) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  leave_at_every_stage(d.socket_path(), GetParam(), d, [&] {
    ASSERT_FALSE(d.exited()) << d.log();
    ASSERT_TRUE(stats(d).is_object()) << d.log();
  });
}

TEST_P(ClientLeavesTest, TheRouterLivesOnAndCancelsWhatRunsOnItsDaemon) {
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  RouterProcess r({d.socket_path()});
  ASSERT_TRUE(r.wait_usable(0, true)) << r.log();
  leave_at_every_stage(r.socket_path(), GetParam(), d, [&] { ASSERT_TRUE(router_settled(r, 0)); });
}

// The scripted daemon's prefill is the cheaper, so the router sends every
// request there first; it refuses as full, and the request is retried on
// the real one.
TEST_P(ClientLeavesTest, TheRouterLivesOnWhenAClientLeavesDuringARetry) {
  const Door door = GetParam();
  Daemon d;
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto c = d.connect();
  auto snapshot = c->call(request(1, "cache.subscribe"));
  ASSERT_TRUE(snapshot && snapshot->contains("result"));
  c->close();
  test_util::TempDir dir;
  ScriptedDaemon full(dir.path(), (*snapshot)["result"]["fingerprint"], {{}});
  full.refuse_with = -32000;
  RouterProcess r({full.path(), d.socket_path()});
  ASSERT_TRUE(r.wait_usable(0, true)) << r.log();
  ASSERT_TRUE(r.wait_usable(1, true)) << r.log();
  const auto retried = [&] { return r.fleet()["choices"]["retried"].get<int>(); };
  {
    SCOPED_TRACE(std::string(name(door)) + ": retried, before the second daemon answers");
    {
      const Stopped stopped(d.pid());
      Streamed s(r.socket_path(), door, kLongTokens);
      // On the real daemon once the router counts it there.
      r.wait_for(1, [](const json& daemon) { return daemon["pending"] == 1; });
      EXPECT_EQ(retried(), 1);
      s.leave();
    }
    ASSERT_TRUE(router_settled(r, 1));
    wait_idle(d);
  }
  {
    SCOPED_TRACE(std::string(name(door)) + ": retried, mid-stream on the second daemon");
    const long before = cancelled(wait_idle(d));
    Streamed s(r.socket_path(), door, kLongTokens);
    {
      ASSERT_TRUE(s.first_token()) << r.log();
      const Stopped stopped(d.pid());
      s.leave();
    }
    EXPECT_EQ(retried(), 2);
    ASSERT_TRUE(router_settled(r, 1));
    EXPECT_EQ(cancelled(wait_idle(d)), before + 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Doors, ClientLeavesTest, ::testing::Values(Door::kJsonRpc, Door::kHttp),
                         [](const auto& info) {
                           return std::string(info.param == Door::kJsonRpc ? "JsonRpc" : "Http");
                         });

}  // namespace
}  // namespace kvtier::daemon_test
