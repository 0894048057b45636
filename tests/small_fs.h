// A small, real file system for the tests that need a full disk
// (slab_file_test.cpp, l3_store_test.cpp, daemon_tiers_test.cpp): ext4 on a
// loop device, or tmpfs, of a given size, mounted on a fresh temporary
// directory, and gone with the object (unmounted, its image and directories
// removed). Mounting needs root, and ext4 needs mkfs.ext4, mount and a free
// loop device: where one is missing mounted() is false and why_not() says
// which, for SKIP_WITHOUT_SMALL_FS.
//
// ext4 is made with no blocks reserved for root (-m 0), so that the free
// space every test reads (statvfs f_bavail) is the same for root and for
// anyone else.
//
// A full disk used to abort the process (inside RocksDB), so the tests of
// it run their bodies through passes_in_child(): an abort then fails one
// test instead of ending the whole run.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tiers/disk_space.h"
#include "util/child_process.h"

namespace kvtier::test_util {

#define SKIP_WITHOUT_SMALL_FS(fs)                                                         \
  do {                                                                                    \
    if (!(fs).mounted()) GTEST_SKIP() << "no small file system here: " << (fs).why_not(); \
  } while (false)

// What an unprivileged writer may still take on the file system of `dir`
// (statvfs f_bavail), 0 if it cannot be asked.
inline std::uint64_t free_bytes(const std::filesystem::path& dir) {
  return tiers::disk_space(dir.string()).value_or(tiers::DiskSpace{}).free;
}

// Takes free space with a new file fill-<n> in `dir` until at most `leave`
// bytes are free there, and returns the free bytes then (a little less than
// `leave` where the last allocation needed metadata blocks too).
inline std::uint64_t fill_leaving(const std::filesystem::path& dir, std::uint64_t leave) {
  int n = 0;
  while (std::filesystem::exists(dir / ("fill-" + std::to_string(n)))) ++n;
  const std::string name = (dir / ("fill-" + std::to_string(n))).string();
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return free_bytes(dir);
  off_t end = 0;
  // A little less each time fallocate fails: one call for the exact amount
  // may need a block of extent tree more than there is.
  for (int tries = 0; tries < 64; ++tries) {
    const std::uint64_t free = free_bytes(dir);
    if (free <= leave) break;
    std::uint64_t want = (free - leave) / 4096 * 4096;
    while (want >= 4096 && ::fallocate(fd, 0, end, static_cast<off_t>(want)) != 0) want /= 2;
    if (want < 4096) break;
    struct stat st {};
    if (::fstat(fd, &st) != 0) break;
    end = st.st_size;
  }
  ::close(fd);
  return free_bytes(dir);
}

// Gives back what fill_leaving() took in `dir`.
inline void unfill(const std::filesystem::path& dir) {
  for (int n = 0; std::filesystem::remove(dir / ("fill-" + std::to_string(n))); ++n) {
  }
}

class SmallFs {
 public:
  enum class Kind { kExt4, kTmpfs };

  // REQUIRES: bytes a multiple of 4096, at least 8 MiB for ext4 (its journal
  // and tables take about 5 MiB of a small one).
  SmallFs(Kind kind, std::uint64_t bytes) : mount_point_(dir_.path() / "mnt") {
    std::filesystem::create_directories(mount_point_);
    if (::geteuid() != 0) {
      why_not_ = "mounting needs root";
      return;
    }
    if (kind == Kind::kTmpfs) {
      const std::string data = "size=" + std::to_string(bytes) + ",mode=0755";
      if (::mount("tmpfs", mount_point_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0)
        why_not_ = std::string("mount tmpfs: ") + std::strerror(errno);
      else
        mounted_ = true;
      return;
    }
    const std::string image = (dir_.path() / "ext4.img").string();
    const int fd = ::open(image.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const bool sized = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    if (fd >= 0) ::close(fd);
    if (!sized) {
      why_not_ = "cannot make the image " + image;
      return;
    }
    if (run({"mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", image}) != 0) {
      why_not_ = "mkfs.ext4 failed or is missing";
      return;
    }
    if (run({"mount", "-o", "loop", image, mount_point_.string()}) != 0) {
      why_not_ = "mount -o loop failed (no loop device, or no permission to mount)";
      return;
    }
    mounted_ = true;
  }

  ~SmallFs() {
    if (!mounted_) return;
    // A process that still has a file open here (a daemon the test killed
    // and reaped does not) makes it busy: detach it then, and the kernel
    // finishes once the last file closes. The loop device goes with it.
    if (::umount2(mount_point_.c_str(), 0) != 0) ::umount2(mount_point_.c_str(), MNT_DETACH);
  }

  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }
  // The mount point: the root of the small file system.
  const std::filesystem::path& path() const { return mount_point_; }

  std::uint64_t free_bytes() const { return test_util::free_bytes(mount_point_); }
  std::uint64_t fill_leaving(std::uint64_t leave) {
    return test_util::fill_leaving(mount_point_, leave);
  }
  void unfill() { test_util::unfill(mount_point_); }

 private:
  // Runs a program (looked up in the sbin folders too, which a test's PATH
  // may lack) with its output discarded; its exit status, or -1 (also when
  // it could not run, or ran past a minute and was killed).
  static int run(std::vector<std::string> args) {
    for (const char* folder : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
      if (::access((folder + args[0]).c_str(), X_OK) == 0) {
        args[0] = folder + args[0];
        break;
      }
    }
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    const auto ran =
        util::run_child(args, {.stdout_fd = null, .stderr_fd = null}, std::chrono::minutes(1));
    if (null >= 0) ::close(null);
    return ran && WIFEXITED(ran->status) ? WEXITSTATUS(ran->status) : -1;
  }

  TempDir dir_;  // holds the image and the mount point; removed after the unmount
  std::filesystem::path mount_point_;
  bool mounted_ = false;
  std::string why_not_;
};

// The environment variable that hands a child test its argument (a path).
inline constexpr char kChildEnv[] = "KVTIER_TEST_CHILD";

// The argument of a test run by passes_in_child(); nullptr in an ordinary
// run, where such a test skips itself.
inline const char* child_argument() { return std::getenv(kChildEnv); }

// This process's environment for a child run of this test binary, with
// `extra` ("NAME=value") added. Not the parent's shard (GTEST_SHARD_INDEX,
// GTEST_TOTAL_SHARDS): the child's one test would fall in another shard and
// never run.
inline std::vector<std::string> child_environment(const std::string& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with("GTEST_SHARD_INDEX=") &&
        !std::string_view(*e).starts_with("GTEST_TOTAL_SHARDS="))
      env.emplace_back(*e);
  env.push_back(extra);
  return env;
}

// Runs the test `name` ("Suite.Test") of this test binary in a child
// process, with `argument` in its environment (child_argument()), and says
// whether it ran and passed; if not, how it ended and everything it printed.
// A fresh process rather than a bare fork(): RocksDB needs its background
// threads, which a fork of a process that has used them lacks. Bounded: a
// child still running after a minute is killed.
inline ::testing::AssertionResult passes_in_child(const std::string& name,
                                                  const std::string& argument) {
  char self[4096] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0)
    return ::testing::AssertionFailure() << "cannot find this test binary";
  TempDir out_dir;
  const std::string out = (out_dir.path() / "child.out").string();
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  const auto ran =
      util::run_child({self, "--gtest_filter=" + name},
                      {.stdout_fd = out_fd,
                       .stderr_fd = out_fd,
                       .env = child_environment(std::string(kChildEnv) + "=" + argument)},
                      std::chrono::minutes(1));
  if (out_fd >= 0) ::close(out_fd);
  if (!ran) return ::testing::AssertionFailure() << ran.error();
  const int status = ran->status;
  const bool timed_out = ran->killed;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  const std::string printed = text.str();
  if (!timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
      printed.find("[  PASSED  ] 1 test.") != std::string::npos &&
      printed.find("[  SKIPPED ]") == std::string::npos)
    return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure() << name << " in a child process ";
  if (timed_out)
    failure << "ran past a minute";
  else if (WIFSIGNALED(status))
    failure << "was killed by signal " << WTERMSIG(status) << " (" << ::strsignal(WTERMSIG(status))
            << ")";
  else
    failure << "exited with " << WEXITSTATUS(status);
  return failure << "; it printed:\n" << printed;
}

}  // namespace kvtier::test_util
