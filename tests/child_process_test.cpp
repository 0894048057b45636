// util/child_process.h: a child's exit status comes back, stop() ends a
// child that ignores SIGTERM with SIGKILL, a child dies with the thread that
// started it, a program that cannot run is an error, and an owner reaps what
// it owns. The deadlines are safety nets, never what a test asserts.
#include "util/child_process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <expected>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace kvtier::util {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kTimeout = 60s;

// A program found on PATH, as the tests' other children are.
SpawnOptions on_path() { return {.search_path = true}; }

TEST(ChildProcessTest, TheExitStatusComesBack) {
  auto child = spawn_child({"sh", "-c", "exit 7"}, on_path());
  ASSERT_TRUE(child) << child.error();
  EXPECT_GT(child->pid(), 0);
  const auto status = child->wait(kTimeout);
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status)) << *status;
  EXPECT_EQ(WEXITSTATUS(*status), 7);
  // Reaped once: asked again, the same status.
  EXPECT_EQ(child->wait(0ms), status);
  EXPECT_EQ(child->stop(0ms).status, *status);
  EXPECT_FALSE(child->stop(0ms).killed);

  const auto ran = run_child({"sh", "-c", "exit 3"}, on_path(), kTimeout);
  ASSERT_TRUE(ran) << ran.error();
  EXPECT_FALSE(ran->killed);
  ASSERT_TRUE(WIFEXITED(ran->status));
  EXPECT_EQ(WEXITSTATUS(ran->status), 3);
}

TEST(ChildProcessTest, TheEnvironmentAndTheStreamsAreTheOnesGiven) {
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  SpawnOptions options = on_path();
  options.stdout_fd = options.stderr_fd = out[1];
  options.env = std::vector<std::string>{"WORD=kvtier", "PATH=/usr/bin:/bin"};
  const auto ran =
      run_child({"sh", "-c", "echo out $WORD; echo err >&2; exit 5"}, options, kTimeout);
  ::close(out[1]);
  std::string printed;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) printed.append(buf, n);
  ::close(out[0]);
  ASSERT_TRUE(ran) << ran.error();
  ASSERT_TRUE(WIFEXITED(ran->status));
  EXPECT_EQ(WEXITSTATUS(ran->status), 5);
  EXPECT_EQ(printed, "out kvtier\nerr\n");
}

TEST(ChildProcessTest, StopEndsAChildThatIgnoresSigtermWithSigkill) {
  // Ignored before exec, so ignored by sleep from its first instruction.
  SpawnOptions options = on_path();
  options.in_child = [] { ::signal(SIGTERM, SIG_IGN); };
  auto child = spawn_child({"sleep", "30"}, options);
  ASSERT_TRUE(child) << child.error();
  const ChildExit end = child->stop(200ms);
  EXPECT_TRUE(end.killed);
  ASSERT_TRUE(WIFSIGNALED(end.status)) << end.status;
  EXPECT_EQ(WTERMSIG(end.status), SIGKILL);
}

TEST(ChildProcessTest, StopEndsAChildThatHeedsSigtermWithIt) {
  auto child = spawn_child({"sleep", "30"}, on_path());
  ASSERT_TRUE(child) << child.error();
  const ChildExit end = child->stop(kTimeout);
  EXPECT_FALSE(end.killed);
  ASSERT_TRUE(WIFSIGNALED(end.status)) << end.status;
  EXPECT_EQ(WTERMSIG(end.status), SIGTERM);
}

// PR_SET_PDEATHSIG: the child gets SIGTERM when the thread that started it
// ends, though this process lives on.
TEST(ChildProcessTest, AChildDiesWithTheThreadThatStartedIt) {
  std::expected<ChildProcess, std::string> child = std::unexpected("not started");
  std::thread([&] { child = spawn_child({"sleep", "30"}, on_path()); }).join();
  ASSERT_TRUE(child) << child.error();
  const auto status = child->wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "sleep outlived the thread that started it";
  ASSERT_TRUE(WIFSIGNALED(*status)) << *status;
  EXPECT_EQ(WTERMSIG(*status), SIGTERM);

  std::expected<ChildProcess, std::string> forked = std::unexpected("not started");
  std::thread([&] { forked = fork_child([] { return ::pause(); }); }).join();
  ASSERT_TRUE(forked) << forked.error();
  const auto forked_status = forked->wait(kTimeout);
  ASSERT_TRUE(forked_status.has_value()) << "the forked child outlived its thread";
  ASSERT_TRUE(WIFSIGNALED(*forked_status)) << *forked_status;
  EXPECT_EQ(WTERMSIG(*forked_status), SIGTERM);
}

TEST(ChildProcessTest, AProgramThatCannotRunIsAnError) {
  const auto missing = spawn_child({"/nonexistent/kvtier-no-such-program", "x"});
  ASSERT_FALSE(missing);
  EXPECT_TRUE(
      test_util::contains(missing.error(), "cannot run /nonexistent/kvtier-no-such-program"))
      << missing.error();
  EXPECT_TRUE(test_util::contains(missing.error(), std::strerror(ENOENT))) << missing.error();

  test_util::TempDir dir;
  const auto not_executable = dir.write("script.sh", "#!/bin/sh\nexit 0\n");
  const auto refused = run_child({not_executable.string()}, {}, kTimeout);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(test_util::contains(refused.error(), std::strerror(EACCES))) << refused.error();

  EXPECT_FALSE(spawn_child({"kvtier-no-such-program"}, on_path()));
  EXPECT_FALSE(spawn_child({}));
}

TEST(ChildProcessTest, AForkedChildExitsWithWhatItsBodyReturns) {
  auto child = fork_child([] { return 42; });
  ASSERT_TRUE(child) << child.error();
  const int status = child->wait();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

// The owner's destructor stops and reaps: nothing is left, not even a
// zombie; with a grace, SIGTERM comes first.
TEST(ChildProcessTest, TheOwnerStopsAndReapsItsChild) {
  pid_t pid = -1;
  {
    auto child = spawn_child({"sleep", "30"}, on_path());
    ASSERT_TRUE(child) << child.error();
    pid = child->pid();
    ChildProcess moved = std::move(*child);
    EXPECT_EQ(child->pid(), -1);
    EXPECT_EQ(moved.pid(), pid);
  }
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);

  // A child that needs its SIGTERM (to write a file) gets it first.
  test_util::TempDir dir;
  const std::string done = (dir.path() / "done").string();
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  {
    SpawnOptions options = on_path();
    options.stdout_fd = ready[1];
    options.stop_grace = kTimeout;
    auto child = spawn_child(
        {"sh", "-c",
         "trap 'touch " + done + "; exit 0' TERM; echo up; while :; do sleep 0.1; done"},
        options);
    ::close(ready[1]);
    ASSERT_TRUE(child) << child.error();
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);  // the trap is set
  }
  ::close(ready[0]);
  EXPECT_TRUE(std::filesystem::exists(done));
}

}  // namespace
}  // namespace kvtier::util
