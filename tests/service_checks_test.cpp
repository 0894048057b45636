// daemon/service_checks.cpp: a configuration that kvtierd.service's sandbox
// forbids is refused at start (exit 78) with the unit setting that forbids
// it and the drop-in that opens it.
//
// The sandbox is the real mechanism where this machine has it: systemd's
// RestrictAddressFamilies= is a seccomp filter that fails socket() of
// another family with EAFNOSUPPORT, and the test installs the same filter
// in kvtierd's process before exec; the dynamic user is another uid
// (nobody) that cannot read root's files.
#include "daemon/service_checks.h"

#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <string>

#include "daemon_test_util.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using daemon_test::run_kvtierd;
using daemon_test::RunResult;

#if defined(__x86_64__)
constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#endif

// RestrictAddressFamilies=AF_UNIX, as systemd installs it: socket() of any
// other family fails with EAFNOSUPPORT. In the child, before exec.
void unix_sockets_only() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAFNOSUPPORT & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    ::_exit(125);
  }
}

// The service's dynamic user, as far as this machine goes: another uid.
void as_nobody() {
  if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(125);
}

bool root() { return ::geteuid() == 0; }

// A folder any user may make a socket in: kvtierd as nobody gets that far.
fs::path open_dir(const test_util::TempDir& dir) {
  const fs::path open = dir.path() / "open";
  fs::create_directory(open);
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::others_exec);
  fs::permissions(open, fs::perms::all);
  return open;
}

void expect_refused_with(const RunResult& r, std::initializer_list<const char*> says) {
  ASSERT_TRUE(r.status.has_value());
  ASSERT_TRUE(WIFEXITED(*r.status)) << r.err;
  ASSERT_NE(WEXITSTATUS(*r.status), 125) << "the test could not set up the child";
  EXPECT_EQ(WEXITSTATUS(*r.status), 78) << r.err;
  for (const char* s : says) EXPECT_TRUE(test_util::contains(r.err, s));
}

TEST(ServiceChecksTest, HttpOnTcpUnderUnixSocketsOnlyNamesRestrictAddressFamilies) {
  test_util::TempDir dir;
  const RunResult r = run_kvtierd({"--socket", (dir.path() / "s.sock").string(), "--http-listen",
                                   "127.0.0.1:" + std::to_string(test_util::free_tcp_port())},
                                  unix_sockets_only);
  expect_refused_with(r, {"http_listen 127.0.0.1:", "may not open AF_INET sockets",
                          "RestrictAddressFamilies=", "kvtierd-tcp.conf"});
  // Said before the model loads: the daemon never got as far as the socket.
  EXPECT_FALSE(fs::exists(dir.path() / "s.sock"));
}

TEST(ServiceChecksTest, ARedisOnTcpUnderUnixSocketsOnlyIsRefusedNotAWarning) {
  test_util::TempDir dir;
  const RunResult r = run_kvtierd({"--socket", (dir.path() / "s.sock").string(), "--remote",
                                   "/nonexistent/redis.sock,[::1]:7000"},
                                  unix_sockets_only);
  expect_refused_with(r, {"remote [::1]:7000", "AF_INET6", "kvtierd-tcp.conf"});
}

// Only what the sandbox forbids is refused: Redis on Unix sockets needs no
// TCP.
TEST(ServiceChecksTest, ARedisOnUnixSocketsIsNotRefused) {
  daemon::DaemonConfig c;
  c.scheduler.cache.remote = "/run/redis/redis.sock, unix:///run/redis/b.sock";
  EXPECT_TRUE(daemon::service_checks(c, std::nullopt, std::nullopt).has_value());
}

TEST(ServiceChecksTest, AKeyFileTheServiceUserCannotReadNamesLoadCredential) {
  if (!root()) GTEST_SKIP() << "needs root, to run kvtierd as another user";
  test_util::TempDir dir;
  const fs::path key = dir.write("api-key", "secret\n");
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  const fs::path open = open_dir(dir);
  const RunResult r = run_kvtierd({"--socket", (open / "s.sock").string(), "--http-listen",
                                   "127.0.0.1:" + std::to_string(test_util::free_tcp_port()),
                                   "--http-api-key-file", key.string()},
                                  as_nobody);
  expect_refused_with(r, {"http_api_key_file", "may not read it",
                          "LoadCredential=api-key:", "/run/credentials/kvtierd.service/api-key"});
}

TEST(ServiceChecksTest, AMissingCredentialSaysLoadCredentialIsNeeded) {
  const std::string path = "/run/credentials/kvtierd.service/redis-password";
  if (fs::exists(path)) GTEST_SKIP() << path << " exists on this machine";
  test_util::TempDir dir;
  const RunResult r = run_kvtierd({"--socket", (dir.path() / "s.sock").string(), "--remote",
                                   "/nonexistent/redis.sock", "--remote-password-file", path});
  expect_refused_with(
      r, {"remote_password_file", "no such credential", "LoadCredential=redis-password:"});
}

TEST(ServiceChecksTest, ASocketGroupTheDaemonIsNotInNamesTheSocketUnit) {
  if (!root()) GTEST_SKIP() << "needs root, to run kvtierd as another user";
  test_util::TempDir dir;
  const fs::path open = open_dir(dir);
  const RunResult r =
      run_kvtierd({"--socket", (open / "s.sock").string(), "--socket-group", "root"}, as_nobody);
  expect_refused_with(
      r, {"socket_group root", "not in the group", "SocketGroup=root", "kvtierd-group.conf"});
}

// Socket activation: systemd made the socket, and only its SocketGroup=
// decides the group; a socket_group that disagrees would leave the group's
// clients out, so it is refused.
TEST(ServiceChecksTest, AnActivatedSocketOfAnotherGroupIsRefused) {
  if (!root()) GTEST_SKIP() << "needs root, to give the socket file a group";
  test_util::TempDir dir;
  const std::string path = (dir.path() / "s.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::chown(path.c_str(), static_cast<uid_t>(-1), 65534), 0);
  daemon::DaemonConfig c;
  c.socket_group = "kvtier";
  const auto wrong = daemon::service_checks(c, gid_t{0}, fd);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_TRUE(test_util::contains(wrong.error(), "systemd made the socket"));
  EXPECT_TRUE(test_util::contains(wrong.error(), "SocketGroup=kvtier"));
  EXPECT_TRUE(daemon::service_checks(c, gid_t{65534}, fd).has_value());
  ::close(fd);
}

}  // namespace
}  // namespace kvtier
