#include "wire/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <limits>
#include <string>

#include "daemon_test_util.h"
#include "test_util.h"
#include "util/child_process.h"

namespace kvtier::wire {
namespace {

// Numbers in the log as people write them: "10 s", not "10.000000 s".
TEST(LogTest, NumbersReadAsPeopleWriteThem) {
  EXPECT_EQ(log_number(10), "10");
  EXPECT_EQ(log_number(0), "0");
  EXPECT_EQ(log_number(-0.0), "0");
  EXPECT_EQ(log_number(2.5), "2.5");
  EXPECT_EQ(log_number(0.25), "0.25");
  EXPECT_EQ(log_number(0.001), "0.001");
  EXPECT_EQ(log_number(3.14159), "3.14");
  EXPECT_EQ(log_number(33.14159), "33.1");
  EXPECT_EQ(log_number(1234.5678), "1235");
  EXPECT_EQ(log_number(1e12), "1000000000000");
  EXPECT_EQ(log_number(-4.5), "-4.5");
  EXPECT_EQ(log_number(std::numeric_limits<double>::infinity()), "inf");
}

// A stderr that blocks (a stalled journald; here a full pipe nobody reads)
// stalls no request: the engine thread logs every finished request, and
// writing those lines is the log thread's business. Once stderr is read
// again, the lines come, none lost.
TEST(LogTest, ABlockedStderrStallsNoRequest) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  const int read_end = pipe_fds[0], write_end = pipe_fds[1];
  ASSERT_GT(::fcntl(write_end, F_SETPIPE_SZ, 4096), 0);
  // Fill the pipe: kvtierd's first line on stderr then blocks.
  ASSERT_EQ(::fcntl(write_end, F_SETFL, O_NONBLOCK), 0);
  const std::string filler(4096, '#');
  while (::write(write_end, filler.data(), filler.size()) > 0) {
  }
  ASSERT_EQ(::fcntl(write_end, F_SETFL, 0), 0);

  test_util::TempDir dir;
  const std::string socket = (dir.path() / "kvtierd.sock").string();
  // Killed and reaped however the test ends.
  const auto daemon = util::spawn_child({KVTIER_DAEMON_PATH, "--socket", socket, "--model",
                                         daemon_test::kModelDir.string(), "--log-level", "info"},
                                        {.stdout_fd = write_end, .stderr_fd = write_end});
  ::close(write_end);
  ASSERT_TRUE(daemon) << daemon.error();

  const int kRequests = 4;
  bool ready = false;
  for (int i = 0; i < 3000 && !ready; ++i) {
    daemon_test::Client probe(socket);
    ready = probe.valid();
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(ready) << "kvtierd did not come up with its stderr blocked";
  daemon_test::Client c(socket);
  for (int i = 0; i < kRequests; ++i) {
    auto r = c.call(daemon_test::request(i + 1, "generate",
                                         daemon_test::generate_params("Q: Why", 8, 0.0f, 0)));
    ASSERT_TRUE(r.has_value()) << "request " << i + 1 << " got no answer";
    EXPECT_TRUE(r->contains("result")) << r->dump();
  }
  // stderr unblocked: the start-up lines and every request's line arrive.
  ::kill(daemon->pid(), SIGTERM);
  std::string err;
  const auto deadline = std::chrono::steady_clock::now() + daemon_test::kTimeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{read_end, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char chunk[4096];
    const ssize_t n = ::read(read_end, chunk, sizeof chunk);
    if (n <= 0) break;  // EOF: kvtierd has exited
    err.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(read_end);
  EXPECT_TRUE(test_util::contains(err, "starting: model"));
  for (int i = 1; i <= kRequests; ++i) {
    EXPECT_TRUE(test_util::contains(err, "info: request " + std::to_string(i) + " ")) << i;
  }
  EXPECT_TRUE(test_util::contains(err, "info: stopped"));
}

}  // namespace
}  // namespace kvtier::wire
