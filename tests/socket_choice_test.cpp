// ctl/socket_choice.cpp, through kvtierctl: with no -s and no
// $KVTIER_SOCKET, a daemon of the user's own is found first, the service's
// socket second (said on stderr), and when neither is there the error names
// both paths.
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "daemon_test_util.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using daemon_test::Daemon;

using daemon_test::kCtlPath;
const fs::path kServiceDir = "/run/kvtier";

// `kvtierctl health` with XDG_RUNTIME_DIR = `runtime` and no KVTIER_SOCKET:
// its exit status and what it printed on stdout and stderr.
test_util::CommandResult health(const fs::path& runtime) {
  return test_util::run_command("env -u KVTIER_SOCKET XDG_RUNTIME_DIR='" + runtime.string() +
                                "' '" + kCtlPath.string() + "' health 2>&1");
}

TEST(SocketChoiceTest, TheUsersOwnDaemonComesFirstAndSilently) {
  test_util::TempDir runtime;
  Daemon d({"--socket", (runtime.path() / "kvtier/kvtierd.sock").string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  const auto r = health(runtime.path());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(r.output.starts_with("ok ")) << r.output;
  EXPECT_FALSE(test_util::contains(r.output, "using"));
}

TEST(SocketChoiceTest, WithNoDaemonTheErrorNamesBothPlaces) {
  if (fs::exists(kServiceDir / "kvtierd.sock"))
    GTEST_SKIP() << "a kvtier service listens at " << kServiceDir << " on this machine";
  test_util::TempDir runtime;
  const auto r = health(runtime.path());
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_TRUE(test_util::contains(r.output, (runtime.path() / "kvtier/kvtierd.sock").string()));
  EXPECT_TRUE(test_util::contains(r.output, "no socket at /run/kvtier/kvtierd.sock either"));
}

// The service's socket is at a fixed path, so this test makes /run/kvtier
// itself, when no service has it, and removes it after. Tests of other
// clients doing the same take the same lock.
TEST(SocketChoiceTest, TheServicesSocketIsFoundAndNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to make " << kServiceDir;
  const int lock = ::open("/tmp/kvtier-run-kvtier.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  if (fs::exists(kServiceDir)) {
    ::close(lock);
    GTEST_SKIP() << kServiceDir << " exists on this machine: a service may own it";
  }
  fs::create_directory(kServiceDir);
  // Removed and unlocked however the test ends (after the daemon stops).
  struct Cleanup {
    int lock;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(kServiceDir, ec);
      ::close(lock);
    }
  } cleanup{lock};
  Daemon d({"--socket", (kServiceDir / "kvtierd.sock").string()});
  ASSERT_TRUE(d.wait_ready()) << d.log();
  test_util::TempDir runtime;
  const auto r = health(runtime.path());
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(
      test_util::contains(r.output, "kvtierctl: using /run/kvtier/kvtierd.sock (no socket at " +
                                        (runtime.path() / "kvtier/kvtierd.sock").string() + ")"));
  daemon_test::shutdown(d);
}

}  // namespace
}  // namespace kvtier
