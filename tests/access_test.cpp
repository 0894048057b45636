// The access decisions of wire/access.h: who may make privileged calls
// and cancel a request, group lookup for --socket-group, and peer credentials.
#include "wire/access.h"

#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "test_util.h"

namespace kvtier::wire {
namespace {

TEST(AccessTest, PrivilegedCallsAreForTheDaemonsUidAndRoot) {
  const uid_t daemon = 1000;
  EXPECT_TRUE(privileged_call_allowed(1000, daemon, false));
  EXPECT_TRUE(privileged_call_allowed(0, daemon, false));
  EXPECT_FALSE(privileged_call_allowed(1001, daemon, false));
  EXPECT_FALSE(privileged_call_allowed(65534, daemon, false));
  // A daemon running as root: only root.
  EXPECT_TRUE(privileged_call_allowed(0, 0, false));
  EXPECT_FALSE(privileged_call_allowed(1000, 0, false));
}

TEST(AccessTest, AllowAnyUidLetsEveryoneIn) {
  EXPECT_TRUE(privileged_call_allowed(1001, 1000, true));
  EXPECT_TRUE(privileged_call_allowed(65534, 0, true));
}

TEST(AccessTest, ARequestIsCancelledByItsConnectionItsUidOrAPrivilegedCaller) {
  const RequestOwner owner{7, 1000};
  EXPECT_TRUE(cancel_allowed(owner, {7, 1000}, false));   // its own connection
  EXPECT_TRUE(cancel_allowed(owner, {8, 1000}, false));   // another connection, same uid
  EXPECT_TRUE(cancel_allowed(owner, {9, 0}, true));       // privileged
  EXPECT_FALSE(cancel_allowed(owner, {9, 1001}, false));  // anyone else
  EXPECT_FALSE(cancel_allowed(owner, {9, std::nullopt}, false));
  // A peer whose uid the kernel did not tell owns only its connection's.
  const RequestOwner unknown{3, std::nullopt};
  EXPECT_TRUE(cancel_allowed(unknown, {3, std::nullopt}, false));
  EXPECT_FALSE(cancel_allowed(unknown, {4, std::nullopt}, false));
  EXPECT_FALSE(cancel_allowed(unknown, {4, 1000}, false));
}

TEST(AccessTest, GroupIdFindsRootAndNamesAMissingGroup) {
  auto root = group_id("root");
  ASSERT_TRUE(root.has_value()) << root.error();
  EXPECT_EQ(*root, 0u);
  auto missing = group_id("kvtier-no-such-group");
  ASSERT_FALSE(missing.has_value());
  EXPECT_TRUE(test_util::contains(missing.error(), "kvtier-no-such-group"));
  EXPECT_FALSE(group_id("").has_value());
}

TEST(AccessTest, PeerCredentialsAreThoseOfTheConnectingProcess) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  auto peer = peer_credentials(fds[0]);
  ::close(fds[0]);
  ::close(fds[1]);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::geteuid());
  EXPECT_EQ(peer->gid, ::getegid());
  EXPECT_EQ(to_string(*peer), "pid " + std::to_string(::getpid()) + " uid " +
                                  std::to_string(::geteuid()) + " gid " +
                                  std::to_string(::getegid()));
  EXPECT_FALSE(peer_credentials(-1).has_value());
}

}  // namespace
}  // namespace kvtier::wire
