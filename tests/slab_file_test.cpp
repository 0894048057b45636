// SlabFile on a real file through real io_uring: whole-slot transfers land
// where they should, more requests than the queue depth all complete, short
// transfers are reported as such, and bad paths are errors, not crashes. On
// a small real file system (tests/small_fs.h): a slab larger than the free
// space is refused before anything is taken, and a fallocate that fails
// with ENOSPC gives back every byte it took.
#include "tiers/slab_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "tests/io_test_util.h"
#include "tests/small_fs.h"
#include "tests/test_util.h"

namespace kvtier::tiers {
namespace {

using test_util::TempDir;

using test_util::AlignedBuffer;

// Collects completions from the completion thread.
struct Results {
  std::mutex mu;
  std::map<std::uint64_t, int> by_tag;
  int submit_errors = 0;
  SlabFile::OnComplete on_complete() {
    return [this](std::uint64_t tag, int result) {
      std::lock_guard lock(mu);
      by_tag[tag] = result;
    };
  }
  SlabFile::OnSubmitError on_submit_error() {
    return [this](int) {
      std::lock_guard lock(mu);
      ++submit_errors;
    };
  }
};

void fill(AlignedBuffer& b, unsigned seed) {
  for (std::size_t i = 0; i < b.size; ++i) b.bytes[i] = std::byte((i * 131 + seed * 7 + 1) & 0xFF);
}

TEST(SlabFile, PreallocatesAndRoundTripsEverySlot) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  Results results;
  SlabFileOptions options{(dir.path() / "slab").string(), 8192, 32, 8, 4};
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(slab) << slab.error();

  struct stat st {};
  ASSERT_EQ(::stat(options.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8192 * 32);
  EXPECT_GE(st.st_blocks * 512, 8192 * 32) << "fallocate reserved the space";

  std::vector<AlignedBuffer> out, in;
  for (unsigned s = 0; s < 32; ++s) {
    out.emplace_back(8192);
    fill(out.back(), s);
    in.emplace_back(8192);
    (*slab)->enqueue_write(s, out.back().bytes, s);
  }
  (*slab)->wait_idle();
  for (unsigned s = 0; s < 32; ++s) (*slab)->enqueue_read(s, in[s].bytes, 100 + s);
  (*slab)->wait_idle();

  std::lock_guard lock(results.mu);
  EXPECT_EQ(results.submit_errors, 0);
  ASSERT_EQ(results.by_tag.size(), 64u);
  for (unsigned s = 0; s < 32; ++s) {
    EXPECT_EQ(results.by_tag[s], 8192) << "write of slot " << s;
    EXPECT_EQ(results.by_tag[100 + s], 8192) << "read of slot " << s;
    EXPECT_EQ(std::memcmp(in[s].bytes, out[s].bytes, 8192), 0) << "slot " << s;
  }
  // Slot s is at byte s * slot_bytes of the file.
  std::vector<char> raw(8192);
  const int fd = ::open(options.path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, raw.data(), raw.size(), 5 * 8192), 8192);
  ::close(fd);
  EXPECT_EQ(std::memcmp(raw.data(), out[5].bytes, 8192), 0);
}

TEST(SlabFile, MoreRequestsThanTheQueueDepthAllComplete) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  Results results;
  SlabFileOptions options{(dir.path() / "slab").string(), 4096, 16, 2, 3};
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(slab) << slab.error();
  AlignedBuffer buf(4096);
  fill(buf, 9);
  for (unsigned i = 0; i < 200; ++i) (*slab)->enqueue_write(i % 16, buf.bytes, i);
  (*slab)->wait_idle();
  std::lock_guard lock(results.mu);
  ASSERT_EQ(results.by_tag.size(), 200u);
  for (const auto& [tag, result] : results.by_tag) EXPECT_EQ(result, 4096) << tag;
}

TEST(SlabFile, ReopenKeepsContents) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  Results results;
  SlabFileOptions options{(dir.path() / "slab").string(), 4096, 4, 4, 1};
  AlignedBuffer out(4096), in(4096);
  fill(out, 3);
  {
    auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
    ASSERT_TRUE(slab) << slab.error();
    (*slab)->enqueue_write(2, out.bytes, 1);
  }  // the destructor waits for the write
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(slab) << slab.error();
  (*slab)->enqueue_read(2, in.bytes, 2);
  (*slab)->wait_idle();
  EXPECT_EQ(std::memcmp(in.bytes, out.bytes, 4096), 0);
}

TEST(SlabFile, ReadPastTheEndIsAShortTransfer) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  Results results;
  SlabFileOptions options{(dir.path() / "slab").string(), 4096, 4, 4, 1};
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(slab) << slab.error();
  // Someone shrinks the file under us: the bytes of slot 3 are gone.
  ASSERT_EQ(::truncate(options.path.c_str(), 4096), 0);
  AlignedBuffer in(4096);
  (*slab)->enqueue_read(3, in.bytes, 7);
  (*slab)->wait_idle();
  std::lock_guard lock(results.mu);
  EXPECT_EQ(results.by_tag.at(7), 0) << "nothing to read is a short transfer, not a success";
}

TEST(SlabFile, OpenErrorsSayWhatFailed) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  Results results;
  // A path under a regular file: ENOTDIR, whoever runs the test.
  const auto file = dir.write("plain", "x");
  auto under_file = SlabFile::open({(file / "slab").string(), 4096, 4, 4, 1}, results.on_complete(),
                                   results.on_submit_error());
  ASSERT_FALSE(under_file);
  EXPECT_TRUE(test_util::contains(under_file.error(), "open"));

  auto bad_slot = SlabFile::open({(dir.path() / "slab").string(), 1000, 4, 4, 1},
                                 results.on_complete(), results.on_submit_error());
  ASSERT_FALSE(bad_slot);
  EXPECT_TRUE(test_util::contains(bad_slot.error(), "multiple of 4096"));

  auto no_slots = SlabFile::open({(dir.path() / "slab").string(), 4096, 0, 4, 1},
                                 results.on_complete(), results.on_submit_error());
  EXPECT_FALSE(no_slots);
}

// ---- on a small file system, filled ------------------------------------------

using test_util::SmallFs;

std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

TEST(SlabFile, MoreThanTheFreeSpaceIsRefusedAndTakesNothing) {
  SKIP_WITHOUT_IO_URING();
  SmallFs fs(SmallFs::Kind::kExt4, 32 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  Results results;
  const std::string path = (fs.path() / "slab").string();
  const std::uint64_t free = fs.free_bytes();
  const std::size_t slots = (free + (1 << 20)) / 4096;
  auto slab =
      SlabFile::open({path, 4096, slots, 4, 1}, results.on_complete(), results.on_submit_error());
  ASSERT_FALSE(slab);
  EXPECT_TRUE(test_util::contains(slab.error(), path));
  EXPECT_TRUE(test_util::contains(slab.error(), "needs " + std::to_string(slots * 4096)));
  EXPECT_TRUE(test_util::contains(slab.error(), std::to_string(free) + " bytes free"));
  EXPECT_FALSE(std::filesystem::exists(path)) << "the file this open created is gone";
  EXPECT_EQ(fs.free_bytes(), free);
}

// Leaves the free space of `dir` in 4 KiB holes, about `holes` of them:
// one-block files, every other one removed. A fallocate of all that is free
// then needs more extent-tree blocks than there are, and fails with ENOSPC
// after taking nearly all of it, past any check made before.
void fragment(SmallFs& fs, int holes) {
  fs.fill_leaving(std::uint64_t{2 * 4096} * static_cast<std::uint64_t>(holes));
  const std::string block(4096, 'f');
  int made = 0;
  for (; fs.free_bytes() >= 4096; ++made) {
    const auto name = fs.path() / ("frag-" + std::to_string(made));
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    const bool written = fd >= 0 && ::write(fd, block.data(), block.size()) == 4096 &&
                         ::fsync(fd) == 0;  // allocated now, next to the one before
    if (fd >= 0) ::close(fd);
    if (!written) break;
  }
  for (int i = 0; i < made; i += 2)
    std::filesystem::remove(fs.path() / ("frag-" + std::to_string(i)));
  ::sync();
}

TEST(SlabFile, FallocateFailingWithEnospcGivesBackEverythingItTook) {
  SKIP_WITHOUT_IO_URING();
  SmallFs fs(SmallFs::Kind::kExt4, 32 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  Results results;
  // A slab from an earlier run, 64 KiB with data in its first slot.
  const std::string old_path = (fs.path() / "old-slab").string();
  AlignedBuffer out(4096), in(4096);
  fill(out, 5);
  {
    auto slab = SlabFile::open({old_path, 4096, 16, 4, 1}, results.on_complete(),
                               results.on_submit_error());
    ASSERT_TRUE(slab) << slab.error();
    (*slab)->enqueue_write(0, out.bytes, 1);
  }
  fragment(fs, 256);
  const std::uint64_t free = fs.free_bytes();
  ASSERT_GE(free, 64u * 4096) << "the holes";

  // A new slab of exactly the free space: the check lets it through, the
  // allocation fails.
  const std::string path = (fs.path() / "slab").string();
  auto slab = SlabFile::open({path, 4096, free / 4096, 4, 1}, results.on_complete(),
                             results.on_submit_error());
  ASSERT_FALSE(slab) << "fallocate found room for " << free << " bytes in 4 KiB holes";
  EXPECT_TRUE(test_util::contains(slab.error(), "fallocate")) << slab.error();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(fs.free_bytes(), free) << "what the failed fallocate took is back";

  // The old slab grown by the free space: back to its 64 KiB, data intact.
  // (Its extent tree may keep one block it grew while the allocation ran.)
  auto grown = SlabFile::open({old_path, 4096, 16 + free / 4096, 4, 1}, results.on_complete(),
                              results.on_submit_error());
  ASSERT_FALSE(grown);
  EXPECT_EQ(file_size(old_path), 16u * 4096);
  EXPECT_GE(fs.free_bytes() + 4096, free);
  auto reopened =
      SlabFile::open({old_path, 4096, 16, 4, 1}, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(reopened) << reopened.error();
  (*reopened)->enqueue_read(0, in.bytes, 2);
  (*reopened)->wait_idle();
  EXPECT_EQ(std::memcmp(in.bytes, out.bytes, 4096), 0);
}

TEST(SlabFile, AnAllocatedSlabReopensOnAFullFileSystem) {
  SKIP_WITHOUT_IO_URING();
  SmallFs fs(SmallFs::Kind::kExt4, 16 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  Results results;
  const SlabFileOptions options{(fs.path() / "slab").string(), 4096, 256, 4, 1};
  ASSERT_TRUE(SlabFile::open(options, results.on_complete(), results.on_submit_error()));
  fs.fill_leaving(0);
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  EXPECT_TRUE(slab) << "its blocks are allocated: it needs nothing more: " << slab.error();
}

TEST(SlabFile, KeepFreeBytesStayFree) {
  SKIP_WITHOUT_IO_URING();
  SmallFs fs(SmallFs::Kind::kTmpfs, 16 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  Results results;
  const std::uint64_t free = fs.free_bytes();
  SlabFileOptions options{(fs.path() / "slab").string(), 4096, 1024, 4, 1};  // 4 MiB
  options.keep_free_bytes = free - (2 << 20);
  auto refused = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_FALSE(refused);
  EXPECT_TRUE(test_util::contains(refused.error(),
                                  std::to_string(options.keep_free_bytes) + " bytes left free"))
      << refused.error();
  EXPECT_FALSE(std::filesystem::exists(options.path));
  options.keep_free_bytes = free - (5 << 20);
  auto slab = SlabFile::open(options, results.on_complete(), results.on_submit_error());
  ASSERT_TRUE(slab) << slab.error();
  EXPECT_GE(fs.free_bytes(), options.keep_free_bytes);
}

}  // namespace
}  // namespace kvtier::tiers
