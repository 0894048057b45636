// A slow disk on a machine whose disks are fast: an ext4 file system in an
// image file on a loop device, whose reads are throttled by the kernel's
// block I/O controller for the processes put under it. For the benches and
// tests that need loading from L3 to cost about what recomputing does (the
// load-or-recompute split), with the real io_uring and O_DIRECT path.
//
// These machines have no device-mapper (no `delay` target), but cgroups
// with the blkio controller (v1: blkio.throttle.read_bps_device) or, on
// cgroup v2, io.max; either throttles a loop device's O_DIRECT reads,
// io_uring's included (measured: 55 MB/s asked, 55 MB/s read). Needs root.
//
// Thread-safety: none; one owner.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvtier::bench {

class SlowDisk {
 public:
  // Makes `image_bytes` of ext4 in `dir`/slow.img, mounts it at `dir`/mnt
  // and a cgroup that throttles its reads to `read_bytes_per_second`. The
  // error says what is missing (root, the controller, a command) or what
  // failed; nothing is left behind then.
  static std::expected<std::unique_ptr<SlowDisk>, std::string> create(
      const std::filesystem::path& dir, std::uint64_t image_bytes,
      std::uint64_t read_bytes_per_second);
  // Takes its processes out of the cgroup, removes it, unmounts and
  // removes the image.
  ~SlowDisk();
  SlowDisk(const SlowDisk&) = delete;
  SlowDisk& operator=(const SlowDisk&) = delete;

  // Where the file system is mounted.
  const std::filesystem::path& path() const { return mount_; }
  // Puts a process (0: this one) under the throttle.
  std::expected<void, std::string> add(pid_t pid = 0);
  // Changes the read rate.
  std::expected<void, std::string> set_rate(std::uint64_t read_bytes_per_second);
  // Reads measured from `bytes` of a file on it with O_DIRECT, in bytes a
  // second, by this process (so add() it first to see the throttle).
  std::expected<double, std::string> measure_read(std::uint64_t bytes);

 private:
  SlowDisk() = default;
  std::expected<void, std::string> write_control(const std::string& file, const std::string& line);

  std::filesystem::path image_, mount_;
  std::filesystem::path cgroup_;  // the throttling group
  std::filesystem::path parent_;  // where its processes go back to
  bool v2_ = false, mounted_ = false;
  std::string device_;  // "MAJ:MIN" of the loop device
  std::vector<pid_t> added_;
};

}  // namespace kvtier::bench
