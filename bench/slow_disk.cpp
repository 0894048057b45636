#include "bench/slow_disk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "util/child_process.h"

namespace kvtier::bench {

namespace fs = std::filesystem;

namespace {

// A program on PATH or in the system folders root's PATH has (mkfs.ext4
// lives in /usr/sbin); empty when there is none.
std::string find_program(const std::string& name) {
  std::string dirs = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::stringstream in(dirs);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

// Runs a command to its end, its output discarded; the error names it.
std::expected<void, std::string> run(std::vector<std::string> argv) {
  const std::string name = argv[0];
  argv[0] = find_program(name);
  if (argv[0].empty()) return std::unexpected(name + " is not installed");
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  auto child = util::spawn_child(argv, {.stdout_fd = null, .stderr_fd = null});
  if (null >= 0) ::close(null);
  if (!child) return std::unexpected("cannot start " + name + ": " + child.error());
  const int status = child->wait();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::unexpected(name + " failed (status " + std::to_string(status) + ")");
  return {};
}

bool has_line(const fs::path& file, const std::string& word) {
  std::ifstream in(file);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}

}  // namespace

std::expected<std::unique_ptr<SlowDisk>, std::string> SlowDisk::create(
    const fs::path& dir, std::uint64_t image_bytes, std::uint64_t read_bytes_per_second) {
  if (::geteuid() != 0) return std::unexpected("a throttled loop device needs root");
  std::unique_ptr<SlowDisk> d(new SlowDisk());
  // The controller: cgroup v2's io, or v1's blkio.
  const fs::path root = "/sys/fs/cgroup";
  const std::string group = "kvtier-slow-" + std::to_string(::getpid());
  if (has_line(root / "cgroup.controllers", "io")) {
    d->v2_ = true;
    d->parent_ = root;
  } else if (fs::exists(root / "blkio" / "blkio.throttle.read_bps_device")) {
    d->parent_ = root / "blkio";
  } else {
    return std::unexpected("no block I/O controller (cgroup v2 io or v1 blkio) to throttle with");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  d->image_ = dir / "slow.img";
  d->mount_ = dir / "mnt";
  {
    std::ofstream image(d->image_, std::ios::binary | std::ios::trunc);
    if (!image) return std::unexpected("cannot create " + d->image_.string());
  }
  fs::resize_file(d->image_, image_bytes, ec);
  if (ec) return std::unexpected("cannot size " + d->image_.string() + ": " + ec.message());
  if (auto ok = run({"mkfs.ext4", "-q", "-F", d->image_.string()}); !ok)
    return std::unexpected(ok.error());
  fs::create_directories(d->mount_, ec);
  if (auto ok = run({"mount", "-o", "loop", d->image_.string(), d->mount_.string()}); !ok)
    return std::unexpected(ok.error());
  d->mounted_ = true;
  struct stat st {};
  if (::stat(d->mount_.c_str(), &st) != 0) return std::unexpected("cannot stat the mount");
  d->device_ = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  if (d->v2_) (void)d->write_control(root / "cgroup.subtree_control", "+io");
  d->cgroup_ = d->parent_ / group;
  if (!fs::create_directory(d->cgroup_, ec) && ec)
    return std::unexpected("cannot make the cgroup " + d->cgroup_.string() + ": " + ec.message());
  if (auto ok = d->set_rate(read_bytes_per_second); !ok) return std::unexpected(ok.error());
  return d;
}

SlowDisk::~SlowDisk() {
  for (pid_t pid : added_) (void)write_control(parent_ / "cgroup.procs", std::to_string(pid));
  std::error_code ec;
  // A process that has just left may hold the group for a moment.
  for (int i = 0; !cgroup_.empty() && i < 50 && fs::exists(cgroup_); ++i) {
    if (::rmdir(cgroup_.c_str()) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (mounted_ && !run({"umount", mount_.string()}))
    (void)run({"umount", "-l", mount_.string()});  // busy: detach it now, free it when idle
  fs::remove(mount_, ec);
  fs::remove(image_, ec);
}

std::expected<void, std::string> SlowDisk::write_control(const std::string& file,
                                                         const std::string& line) {
  std::ofstream out(file);
  out << line << "\n";
  out.flush();
  if (!out) return std::unexpected("cannot write '" + line + "' to " + file);
  return {};
}

std::expected<void, std::string> SlowDisk::add(pid_t pid) {
  if (pid == 0) pid = ::getpid();
  if (auto ok = write_control(cgroup_ / "cgroup.procs", std::to_string(pid)); !ok) return ok;
  added_.push_back(pid);
  return {};
}

std::expected<void, std::string> SlowDisk::set_rate(std::uint64_t read_bytes_per_second) {
  const std::string rate = std::to_string(read_bytes_per_second);
  return v2_ ? write_control(cgroup_ / "io.max", device_ + " rbps=" + rate)
             : write_control(cgroup_ / "blkio.throttle.read_bps_device", device_ + " " + rate);
}

std::expected<double, std::string> SlowDisk::measure_read(std::uint64_t bytes) {
  constexpr std::size_t kChunk = 1 << 20;
  const fs::path file = mount_ / "measure";
  const std::uint64_t chunks = std::max<std::uint64_t>(1, bytes / kChunk);
  void* raw = std::aligned_alloc(4096, kChunk);
  if (raw == nullptr) return std::unexpected("no memory for the measurement");
  std::unique_ptr<void, decltype(&std::free)> buffer(raw, &std::free);
  std::fill_n(static_cast<char*>(raw), kChunk, 'k');
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  bool ok = fd >= 0;
  for (std::uint64_t i = 0; ok && i < chunks; ++i)
    ok = ::write(fd, raw, kChunk) == static_cast<ssize_t>(kChunk);
  ok = ok && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  fd = ok ? ::open(file.c_str(), O_RDONLY | O_DIRECT) : -1;
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; fd >= 0 && ok && i < chunks; ++i)
    ok = ::read(fd, raw, kChunk) == static_cast<ssize_t>(kChunk);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (fd >= 0) ::close(fd);
  std::error_code ec;
  fs::remove(file, ec);
  if (!ok || fd < 0) return std::unexpected("cannot write and read " + file.string());
  return static_cast<double>(chunks * kChunk) / took;
}

}  // namespace kvtier::bench
