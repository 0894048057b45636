// The systemd units of daemon/systemd/: `systemd-analyze verify` accepts
// them, and the copies for installation carry the install prefix's paths.
//
// The build-tree copies are verified, since verify checks that ExecStart=
// names an existing executable: they point at the kvtierd just built, the
// installed ones at a prefix that may not exist yet.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// CMake configures the units into the systemd/ folder beside kvtierd's.
const fs::path kUnitDir = fs::path(KVTIER_DAEMON_PATH).parent_path() / "systemd";

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

TEST(SystemdUnitsTest, SystemdAnalyzeVerifyAcceptsTheUnits) {
  if (!on_path("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not on PATH";
  if (!on_path("timeout")) GTEST_SKIP() << "timeout (coreutils) is not on PATH";
  const fs::path service = kUnitDir / "kvtierd.service";
  const fs::path socket = kUnitDir / "kvtierd.socket";
  ASSERT_TRUE(fs::exists(service)) << service;
  ASSERT_TRUE(fs::exists(socket)) << socket;
  // --man=no: the check of Documentation= man pages needs man-db.
  const std::string command = "timeout 60 systemd-analyze verify --man=no '" + service.string() +
                              "' '" + socket.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char chunk[4096];
  while (std::size_t n = std::fread(chunk, 1, sizeof(chunk), pipe)) output.append(chunk, n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
}

TEST(SystemdUnitsTest, InstalledCopiesUseTheInstallPrefix) {
  const std::string service = read_all(kUnitDir / "install" / "kvtierd.service");
  const std::string socket = read_all(kUnitDir / "install" / "kvtierd.socket");
  ASSERT_FALSE(service.empty());
  ASSERT_FALSE(socket.empty());
  EXPECT_FALSE(test_util::contains(service, "@KVTIER_"));  // every @VAR@ replaced
  EXPECT_TRUE(test_util::contains(service, "Type=notify"));
  EXPECT_TRUE(test_util::contains(service, "/bin/kvtierd --config /"));
  EXPECT_TRUE(test_util::contains(socket, "ListenStream=/run/kvtier/kvtierd.sock"));
  EXPECT_TRUE(test_util::contains(socket, "SocketMode=0660"));
}

}  // namespace
}  // namespace kvtier
