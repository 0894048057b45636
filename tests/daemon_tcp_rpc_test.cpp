// JSON-RPC on kvtierd's TCP listener (http_listen), black-box: a real
// daemon and a plain TCP client. The port serves JSON-RPC and HTTP alike;
// with an API key, a JSON-RPC connection must `auth` first; a TCP peer has
// no credentials, so it is never privileged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon_test_util.h"
#include "wire/protocol.h"

namespace kvtier::daemon_test {
namespace {

namespace rpc_code = kvtier::wire::rpc_code;

constexpr const char* kKey = "0123456789abcdef0123";

// A key file (mode 0600) in `dir`.
std::string key_file(const std::filesystem::path& dir) {
  const std::filesystem::path key = dir / "key";
  std::ofstream(key) << kKey << "\n";
  std::filesystem::permissions(
      key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return key.string();
}

int error_code(const std::optional<json>& r) {
  return r && r->contains("error") ? (*r)["error"].value("code", 0) : 0;
}

TEST(DaemonTcpRpcTest, WithAKeyEveryCallButAuthAndHelpWaitsForAuth) {
  test_util::TempDir dir;
  const int port = test_util::free_tcp_port();
  Daemon d({"--http-listen", "127.0.0.1:" + std::to_string(port), "--http-api-key-file",
            key_file(dir.path())});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto c = Client::tcp(port);
  ASSERT_TRUE(c && c->valid());
  EXPECT_EQ(error_code(c->call(request(1, "health"))), rpc_code::kUnauthenticated);
  EXPECT_TRUE(c->call(request(2, "help")).value_or(json()).contains("result"));
  EXPECT_EQ(error_code(c->call(request(3, "auth", {{"api_key", "wrong-key-0123456789"}}))),
            rpc_code::kUnauthenticated);
  EXPECT_EQ(error_code(c->call(request(4, "auth", {{"key", kKey}}))), rpc_code::kInvalidParams);
  EXPECT_EQ(error_code(c->call(request(5, "generate", {{"prompt", "Q: Why"}}))),
            rpc_code::kUnauthenticated);
  const auto ok = c->call(request(6, "auth", {{"api_key", kKey}}));
  ASSERT_TRUE(ok && ok->contains("result")) << (ok ? ok->dump() : "no answer");
  EXPECT_EQ((*ok)["result"]["authenticated"], true);

  // Then it is a client like any other: the same tokens as on the socket.
  const json params = {{"prompt", "Q: What is a towel for? A:"}, {"max_tokens", 8}, {"seed", 2}};
  const auto via_tcp = c->call(request(7, "generate", params));
  auto local = d.connect();
  const auto via_socket = local->call(request(1, "generate", params));
  ASSERT_TRUE(via_tcp && via_tcp->contains("result")) << (via_tcp ? via_tcp->dump() : "");
  ASSERT_TRUE(via_socket && via_socket->contains("result"));
  EXPECT_EQ((*via_tcp)["result"]["tokens"], (*via_socket)["result"]["tokens"]);

  // No credentials on TCP: never privileged, whatever the key.
  EXPECT_EQ(error_code(c->call(request(8, "shutdown"))), rpc_code::kPermissionDenied);
  EXPECT_TRUE(local->call(request(2, "health")).value_or(json()).contains("result"));
}

// A connection that never gives the key does not keep its slot: it is
// closed once http_timeout has passed; one that did stays.
TEST(DaemonTcpRpcTest, AConnectionThatDoesNotAuthenticateIsClosed) {
  test_util::TempDir dir;
  const int port = test_util::free_tcp_port();
  Daemon d({"--http-listen", "127.0.0.1:" + std::to_string(port), "--http-api-key-file",
            key_file(dir.path()), "--http-timeout", "0.5"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto idle = Client::tcp(port);
  auto authed = Client::tcp(port);
  ASSERT_TRUE(idle && authed);
  ASSERT_TRUE(
      authed->call(request(1, "auth", {{"api_key", kKey}})).value_or(json()).contains("result"));
  EXPECT_FALSE(idle->read().has_value()) << "the unauthenticated connection stayed open";
  EXPECT_TRUE(authed->call(request(2, "health")).value_or(json()).contains("result"));
}

// Without a key on loopback, no auth is asked; and even --allow-any-uid
// makes no TCP peer privileged (the kernel reports no uid for it: Linux's
// SO_PEERCRED on TCP says uid -1 rather than failing).
TEST(DaemonTcpRpcTest, OnLoopbackWithoutAKeyNoAuthIsAskedAndNoPeerIsPrivileged) {
  const int port = test_util::free_tcp_port();
  Daemon d({"--http-listen", std::to_string(port), "--allow-any-uid"});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  auto c = Client::tcp(port);
  ASSERT_TRUE(c && c->valid());
  const auto health = c->call(request(1, "health"));
  ASSERT_TRUE(health && health->contains("result")) << (health ? health->dump() : "no answer");
  const auto auth = c->call(request(2, "auth", {{"api_key", "anything"}}));
  ASSERT_TRUE(auth && auth->contains("result"));
  EXPECT_EQ((*auth)["result"]["required"], false);
  EXPECT_EQ(error_code(c->call(request(3, "config.set", {{"log_level", "debug"}}))),
            rpc_code::kPermissionDenied);
  EXPECT_EQ(error_code(c->call(request(4, "shutdown"))), rpc_code::kPermissionDenied);
  EXPECT_TRUE(c->call(request(5, "health")).value_or(json()).contains("result"));
}

}  // namespace
}  // namespace kvtier::daemon_test
