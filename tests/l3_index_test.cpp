// L3Index against a real RocksDB in a temporary directory: entries survive a
// reopen, another format discards them, damaged values are dropped with a
// warning instead of being trusted, a damaged index is moved aside while one
// in use or out of reach is refused, and a full disk fails writes without
// an abort until the index is recovered.
#include "tiers/l3_index.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/index_damage.h"
#include "tests/small_fs.h"
#include "tests/test_util.h"
#include "util/child_process.h"

namespace kvtier::tiers {
namespace {

using test_util::contains;
using test_util::TempDir;

L3Entry entry(std::uint64_t i) {
  L3Entry e;
  e.record.key = {i * 0x9E3779B97F4A7C15ull, i + 1};
  // The owner's metadata: opaque bytes, of any length.
  for (std::uint64_t b = 0; b < 8 + i % 5; ++b) e.record.meta.push_back(std::byte(b * 37 + i));
  e.offset = i * 8192;
  e.length = 5000;
  e.checksum = 0xC0FFEE ^ i;
  e.last_use = 10 + i;
  return e;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST(L3Index, ValueEncodingRoundTripsAndRejectsDamage) {
  const L3Entry e = entry(42);
  const std::string v = L3Index::encode_value(e);
  EXPECT_EQ(v.size(), 34u + e.record.meta.size());
  const auto back = L3Index::decode_value(e.record.key, v);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, e);

  EXPECT_FALSE(L3Index::decode_value(e.record.key, ""));
  // Cut anywhere. (The checksum's low half is zero so that a cut inside it
  // leaves what could pass for empty metadata.)
  L3Entry zeros = e;
  zeros.checksum = 0x1234567800000000ull;
  const std::string z = L3Index::encode_value(zeros);
  for (std::size_t n = 0; n < z.size(); ++n)
    EXPECT_FALSE(L3Index::decode_value(e.record.key, z.substr(0, n))) << "cut to " << n << " bytes";
  EXPECT_FALSE(L3Index::decode_value(e.record.key, v + "x")) << "trailing byte";
  std::string other_version = v;
  other_version[0] = 4;
  EXPECT_FALSE(L3Index::decode_value(e.record.key, other_version));
  std::string huge_count = v;
  huge_count[30] = '\xFF';  // metadata length's low byte
  huge_count[33] = '\x7F';  // and high byte: ~2 GiB announced in a short value
  EXPECT_FALSE(L3Index::decode_value(e.record.key, huge_count));

  // Version 2, written before pieces (no piece count), still reads.
  std::string v2 = v;
  v2.erase(29, 1);
  v2[0] = 2;
  EXPECT_EQ(L3Index::decode_value(e.record.key, v2), e);
}

// An entry checked in pieces keeps their checksums; pieces that do not hash
// to its checksum, or too many of them, are refused.
TEST(L3Index, PieceChecksumsRoundTripAndMustMatchTheChecksum) {
  L3Entry e = entry(7);
  e.pieces = {11, 22, 33, 44};
  e.checksum = piece_checksum_of(e.pieces);
  const std::string v = L3Index::encode_value(e);
  EXPECT_EQ(L3Index::decode_value(e.record.key, v), e);
  L3Entry other = e;
  other.pieces[2] = 34;
  EXPECT_FALSE(L3Index::decode_value(e.record.key, L3Index::encode_value(other)));
  L3Entry many = e;
  many.pieces.assign(65, 1);
  many.checksum = piece_checksum_of(many.pieces);
  EXPECT_FALSE(L3Index::decode_value(e.record.key, L3Index::encode_value(many)));

  const BlockKey k{0x0102030405060708ull, 0x1112131415161718ull};
  EXPECT_EQ(L3Index::decode_key(L3Index::encode_key(k)), k);
  EXPECT_FALSE(L3Index::decode_key("k123"));
  // Big-endian keys sort like the numbers.
  EXPECT_LT(L3Index::encode_key({1, 0xFF}), L3Index::encode_key({2, 0}));
}

TEST(L3Index, EntriesSurviveReopen) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    std::vector<L3Entry> batch = {entry(1), entry(2), entry(3)};
    ASSERT_TRUE(opened->index->put(batch));
    ASSERT_TRUE(opened->index->erase(entry(2).record.key));
    ASSERT_TRUE(opened->index->erase(BlockKey{99, 99})) << "a missing key is not an error";
    L3Entry moved = entry(3);
    moved.last_use = 1000;
    ASSERT_TRUE(opened->index->put(moved));
  }
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->warnings.empty()) << joined(opened->warnings);
  ASSERT_EQ(opened->entries.size(), 2u);
  std::map<BlockKey, L3Entry> by_key;
  for (const auto& e : opened->entries) by_key[e.record.key] = e;
  EXPECT_EQ(by_key.at(entry(1).record.key), entry(1));
  EXPECT_EQ(by_key.at(entry(3).record.key).last_use, 1000u);
}

TEST(L3Index, AnotherFormatOrBlockSizeDiscardsEntries) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    ASSERT_TRUE(opened->index->put(entry(1)));
  }
  {
    auto opened = L3Index::open(path, 8, 5000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    EXPECT_TRUE(contains(joined(opened->warnings), "format_tag 7")) << joined(opened->warnings);
    ASSERT_TRUE(opened->index->put(entry(2)));
  }
  {
    auto opened = L3Index::open(path, 8, 6000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    EXPECT_TRUE(contains(joined(opened->warnings), "block_bytes 5000"));
  }
  // The new format stuck: reopening with it finds nothing to complain about.
  auto opened = L3Index::open(path, 8, 6000);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->warnings.empty()) << joined(opened->warnings);
}

TEST(L3Index, DamagedValuesAreDroppedWithAWarning) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    ASSERT_TRUE(opened->index->put(entry(1)));
  }
  {
    // Damage behind the index's back, through RocksDB itself.
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    ASSERT_TRUE(rocksdb::DB::Open(options, path, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const std::string good = L3Index::encode_value(entry(2));
    ASSERT_TRUE(db->Put({}, L3Index::encode_key(entry(2).record.key), good.substr(0, 20)).ok());
    ASSERT_TRUE(db->Put({}, L3Index::encode_key(entry(3).record.key), "\x09garbage").ok());
  }
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  ASSERT_EQ(opened->entries.size(), 1u);
  EXPECT_EQ(opened->entries[0], entry(1));
  EXPECT_TRUE(contains(joined(opened->warnings), "dropped 2 undecodable"))
      << joined(opened->warnings);
  opened->index.reset();
  auto again = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(again) << again.error();
  EXPECT_TRUE(again->warnings.empty())
      << "dropped entries were deleted: " << joined(again->warnings);
}

TEST(L3Index, UnopenablePathIsAnError) {
  TempDir dir;
  const auto file = dir.write("plain", "x");
  auto opened = L3Index::open((file / "index").string(), 7, 5000);
  ASSERT_FALSE(opened);
  EXPECT_TRUE(contains(opened.error(), "index"));
}

// An index holding entry(1), closed. Opened twice, so that the second open
// has moved the entry from the log into a table.
void make_index(const std::string& path) {
  {
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    ASSERT_TRUE(opened->index->put(entry(1)));
  }
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  ASSERT_EQ(opened->entries.size(), 1u);
}

TEST(L3Index, DamageOfEveryKindIsMovedAsideAndANewIndexStarts) {
  std::vector<test_util::IndexDamage> kinds = test_util::index_damage_kinds();
  kinds.push_back({"a table deleted", [](const std::filesystem::path& p) {
                     for (const auto& e : std::filesystem::directory_iterator(p))
                       if (e.path().extension() == ".sst") std::filesystem::remove(e.path());
                   }});
  for (const auto& [name, damage] : kinds) {
    SCOPED_TRACE(name);
    TempDir dir;
    const std::string path = (dir.path() / "index").string();
    make_index(path);
    damage(path);
    auto opened = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(opened) << opened.error();
    EXPECT_TRUE(opened->entries.empty());
    ASSERT_FALSE(opened->warnings.empty());
    EXPECT_TRUE(contains(opened->warnings[0], "index " + path + " is damaged ("));
    EXPECT_TRUE(contains(opened->warnings[0], "moved to " + path + ".damaged, L3 starts empty"));
    EXPECT_TRUE(std::filesystem::exists(path + ".damaged"));
    ASSERT_TRUE(opened->index->put(entry(2)));
    opened->index.reset();
    auto again = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(again) << again.error();
    EXPECT_TRUE(again->warnings.empty()) << joined(again->warnings);
    ASSERT_EQ(again->entries.size(), 1u);
    EXPECT_EQ(again->entries[0], entry(2));
  }
}

TEST(L3Index, InUseOrOutOfReachIsRefusedAndNothingMoves) {
  TempDir dir;
  const std::string path = (dir.path() / "index").string();
  make_index(path);
  {
    // By this process.
    auto first = L3Index::open(path, 7, 5000);
    ASSERT_TRUE(first) << first.error();
    auto second = L3Index::open(path, 7, 5000);
    ASSERT_FALSE(second);
    EXPECT_TRUE(contains(second.error(), "already open in this process"));
    EXPECT_TRUE(first->index->put(entry(3))) << "the first one keeps its lock";
  }
  {
    // By another process, holding the lock as its RocksDB would.
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    auto holder = util::fork_child([&]() -> int {
      const int fd = ::open((path + "/LOCK").c_str(), O_RDWR);
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      if (fd < 0 || ::fcntl(fd, F_SETLK, &lock) != 0) return 1;
      if (::write(ready[1], "r", 1) != 1) return 2;
      ::pause();
      return 0;
    });
    ASSERT_TRUE(holder) << holder.error();
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    auto opened = L3Index::open(path, 7, 5000);
    (void)holder->stop(std::chrono::milliseconds(0));  // SIGKILL
    ::close(ready[0]);
    ::close(ready[1]);
    ASSERT_FALSE(opened);
    EXPECT_TRUE(contains(opened.error(), "in use by process " + std::to_string(holder->pid())));
  }
  if (::geteuid() == 0) {
    // Not ours to read: as another user, in a child.
    ASSERT_EQ(::chmod(path.c_str(), 0700), 0);
    int msg[2];
    ASSERT_EQ(::pipe(msg), 0);
    auto child = util::fork_child([&]() -> int {
      const gid_t nobody = 65534;
      if (::setgroups(1, &nobody) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) return 3;
      auto opened = L3Index::open(path, 7, 5000);
      const std::string text = opened ? "opened" : opened.error();
      if (::write(msg[1], text.data(), text.size()) < 0) return 4;
      return 0;
    });
    ::close(msg[1]);
    ASSERT_TRUE(child) << child.error();
    std::string text;
    char buf[512];
    for (ssize_t n; (n = ::read(msg[0], buf, sizeof buf)) > 0;) text.append(buf, n);
    ::close(msg[0]);
    const int status = child->wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_TRUE(contains(text, "Permission denied"));
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".damaged"));
  auto opened = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->warnings.empty()) << joined(opened->warnings);
  EXPECT_EQ(opened->entries.size(), 2u) << "entry(1) and entry(3), untouched";
}

// The child of AFullDiskFailsWritesUntilRecovered: an index on the small
// file system mounted at the path it is given, which it fills up.
TEST(L3IndexChild, AFullDiskFailsWritesUntilRecovered) {
  const char* mount = test_util::child_argument();
  if (mount == nullptr) GTEST_SKIP() << "runs only as the child of AFullDiskFails...";
  const std::string path = (std::filesystem::path(mount) / "index").string();
  auto opened = L3Index::open(path, 7, 5000, 1 << 20);
  ASSERT_TRUE(opened) << opened.error();
  L3Index& index = *opened->index;
  ASSERT_TRUE(index.put(entry(1)));
  test_util::fill_leaving(mount, 0);
  // Until a write fails (the first, or one a little later once the log's
  // last block is full).
  std::uint64_t i = 2;
  while (i < 100000 && index.put(entry(i))) ++i;
  ASSERT_TRUE(index.failed()) << "every write went through on a full file system";
  // From now on RocksDB is not asked: SyncWAL on the log that failed would abort.
  auto put = index.put(entry(1));
  ASSERT_FALSE(put);
  EXPECT_TRUE(contains(put.error(), "not tried since an earlier write failed")) << put.error();
  EXPECT_FALSE(index.sync());
  EXPECT_FALSE(index.erase(entry(1).record.key));
  auto recovered = index.recover();
  ASSERT_FALSE(recovered) << "reopened with the file system full";
  EXPECT_TRUE(contains(recovered.error(), "bytes free")) << recovered.error();

  test_util::unfill(mount);
  ASSERT_TRUE(index.recover());
  EXPECT_FALSE(index.failed());
  EXPECT_TRUE(index.put(entry(999999)));
  EXPECT_TRUE(index.sync());
  opened->index.reset();
  auto again = L3Index::open(path, 7, 5000);
  ASSERT_TRUE(again) << again.error();
  std::map<BlockKey, L3Entry> by_key;
  for (const auto& e : again->entries) by_key[e.record.key] = e;
  EXPECT_EQ(by_key.count(entry(1).record.key), 1u);
  EXPECT_EQ(by_key.count(entry(999999).record.key), 1u);
}

TEST(L3Index, AFullDiskFailsWritesUntilRecovered) {
  for (const auto kind : {test_util::SmallFs::Kind::kExt4, test_util::SmallFs::Kind::kTmpfs}) {
    test_util::SmallFs fs(kind, 32 << 20);
    SKIP_WITHOUT_SMALL_FS(fs);
    EXPECT_TRUE(test_util::passes_in_child("L3IndexChild.AFullDiskFailsWritesUntilRecovered",
                                           fs.path().string()))
        << (kind == test_util::SmallFs::Kind::kExt4 ? "ext4" : "tmpfs");
  }
}

}  // namespace
}  // namespace kvtier::tiers
