// L3Store with its real parts: RocksDB in a temporary directory, io_uring on a
// real slab file. Round trips, restarts, eviction, corruption, real faults
// (a path under a file, RLIMIT_FSIZE, a slab truncated under a live store),
// a process killed at random moments, every kind of damage to the index,
// and a small real file system (tests/small_fs.h) too small for the store,
// nearly full at start-up, and filling up under a running store.
#include "tiers/l3_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <liburing.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/index_damage.h"
#include "tests/io_test_util.h"
#include "tests/small_fs.h"
#include "tests/test_util.h"
#include "util/child_process.h"

namespace kvtier::tiers {
namespace {

using namespace std::chrono_literals;
using test_util::contains;
using test_util::TempDir;

constexpr std::uint64_t kOwner = 0xF1A9;
constexpr std::uint64_t kFormat = 0x7A6;
constexpr std::size_t kBlockBytes = 5000;  // slots round it up to 8192

using test_util::AlignedBuffer;

BlockKey key_of(std::uint64_t i) {
  return {0xB10C000000000000ull ^ (i * 0x9E3779B97F4A7C15ull), i + 1};
}

// The owner's metadata for block i (opaque to the store): the block's id,
// then the owner's tag.
std::vector<std::byte> meta_of(std::uint64_t i, std::uint64_t owner = kOwner) {
  std::vector<std::byte> meta;
  for (std::uint64_t v : {i, owner})
    for (int b = 0; b < 8; ++b) meta.push_back(static_cast<std::byte>((v >> (8 * b)) & 0xFF));
  return meta;
}

std::uint64_t id_of(const BlockRecord& record) {
  std::uint64_t id = 0;
  for (int b = 0; b < 8; ++b) id |= std::to_integer<std::uint64_t>(record.meta.at(b)) << (8 * b);
  return id;
}

BlockRecord record_of(std::uint64_t i) { return {key_of(i), meta_of(i)}; }

// Bytes that only this key's block holds.
void fill_for(const BlockKey& key, std::byte* dst, std::size_t n) {
  std::uint64_t s = key.hi ^ (key.lo << 1);
  for (std::size_t i = 0; i < n; i += 8) {
    s += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(dst + i, &z, std::min<std::size_t>(8, n - i));
  }
}

bool holds(const BlockKey& key, const std::byte* p, std::size_t n) {
  std::vector<std::byte> want(n);
  fill_for(key, want.data(), n);
  return std::memcmp(want.data(), p, n) == 0;
}

L3Options options_for(const std::filesystem::path& dir, std::size_t slots) {
  L3Options o;
  o.path = dir.string();
  o.block_bytes = kBlockBytes;
  o.capacity_bytes = slots * 8192;
  o.format_tag = kFormat;
  o.queue_depth = 8;
  return o;
}

// options_for() with the breaker's clock at *now, which the test moves by
// hand, and a backoff of 5 ms doubling to 10.
L3Options options_on_a_manual_clock(
    const std::filesystem::path& dir, std::size_t slots,
    const std::shared_ptr<std::chrono::steady_clock::time_point>& now) {
  L3Options o = options_for(dir, slots);
  o.clock = [now] { return *now; };
  o.backoff_initial = std::chrono::milliseconds(5);
  o.backoff_max = std::chrono::milliseconds(10);
  return o;
}

std::unique_ptr<L3Store> open_or_die(const L3Options& o) {
  auto s = L3Store::open(o);
  if (!s) throw std::runtime_error(s.error());
  return std::move(*s);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Waits for everything in flight and returns the completions by ticket.
std::map<std::uint64_t, StoreCompletion> finish_all(L3Store& s) {
  s.drain();
  std::map<std::uint64_t, StoreCompletion> out;
  for (const auto& c : s.poll()) out[c.ticket] = c;
  return out;
}

StoreStatus finish(L3Store& s, std::uint64_t ticket) {
  auto all = finish_all(s);
  auto it = all.find(ticket);
  if (it == all.end()) {
    ADD_FAILURE() << "no completion for ticket " << ticket;
    return StoreStatus::kIoError;
  }
  return it->second.status;
}

StoreStatus put(L3Store& s, std::uint64_t i) {
  AlignedBuffer b;
  fill_for(key_of(i), b.bytes, kBlockBytes);
  return finish(s, s.write(record_of(i), b.bytes));
}

// Reads block i; *intact says whether it holds block i's bytes.
StoreStatus get(L3Store& s, std::uint64_t i, bool* intact = nullptr) {
  AlignedBuffer b;
  const StoreStatus st = finish(s, s.read(key_of(i), meta_of(i), b.bytes));
  if (intact) *intact = holds(key_of(i), b.bytes, kBlockBytes);
  return st;
}

TEST(L3Store, RoundTripsManyBlocksBitForBit) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  auto store = open_or_die(options_for(dir.path(), 64));
  EXPECT_EQ(store->slot_bytes(), 8192u);
  EXPECT_EQ(store->block_bytes(), kBlockBytes);

  constexpr int kN = 48;
  std::vector<AlignedBuffer> out(kN), in(kN);
  std::map<std::uint64_t, int> tickets;
  for (int i = 0; i < kN; ++i) {
    fill_for(key_of(i), out[i].bytes, kBlockBytes);
    tickets[store->write(record_of(i), out[i].bytes)] = i;
  }
  auto done = finish_all(*store);
  ASSERT_EQ(done.size(), static_cast<std::size_t>(kN));
  for (const auto& [ticket, c] : done) {
    EXPECT_EQ(c.status, StoreStatus::kOk) << to_string(c.status);
    EXPECT_TRUE(c.is_write);
    EXPECT_EQ(c.key, key_of(tickets.at(ticket)));
  }
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(store->contains(key_of(i)));
    EXPECT_EQ(store->lookup(key_of(i)), record_of(i));
  }

  tickets.clear();
  for (int i = 0; i < kN; ++i) tickets[store->read(key_of(i), meta_of(i), in[i].bytes)] = i;
  done = finish_all(*store);
  ASSERT_EQ(done.size(), static_cast<std::size_t>(kN));
  for (const auto& [ticket, c] : done) {
    const int i = tickets.at(ticket);
    EXPECT_EQ(c.status, StoreStatus::kOk) << to_string(c.status);
    EXPECT_FALSE(c.is_write);
    EXPECT_EQ(std::memcmp(in[i].bytes, out[i].bytes, kBlockBytes), 0) << "block " << i;
  }

  StoreStats st = store->stats();
  EXPECT_EQ(st.capacity_blocks, 64u);
  EXPECT_EQ(st.used_blocks, static_cast<std::size_t>(kN));
  EXPECT_EQ(st.writes, kN);
  EXPECT_EQ(st.reads, kN);
  EXPECT_EQ(st.write_bytes, kN * static_cast<long>(kBlockBytes));
  EXPECT_EQ(st.read_bytes, kN * static_cast<long>(kBlockBytes));
  EXPECT_EQ(st.checksum_failures + st.io_errors + st.evictions + st.dropped_writes, 0);
  EXPECT_TRUE(st.available);
  EXPECT_GT(st.mean_read_us, 0);
  EXPECT_GE(st.p99_write_us, st.mean_write_us * 0) << "p99 is a number";

  // A stored key is not written again.
  EXPECT_EQ(put(*store, 3), StoreStatus::kOk);
  EXPECT_EQ(store->stats().writes, kN);
  // A key never written, and one read expecting another owner's metadata.
  AlignedBuffer b;
  EXPECT_EQ(finish(*store, store->read(key_of(999), meta_of(999), b.bytes)),
            StoreStatus::kNotFound);
  EXPECT_EQ(finish(*store, store->read(key_of(4), meta_of(4, kOwner + 1), b.bytes)),
            StoreStatus::kChecksumMismatch);
  EXPECT_FALSE(store->contains(key_of(4)));
  EXPECT_EQ(store->stats().checksum_failures, 1);
}

TEST(L3Store, ReopenRecoversEntriesFreeSlotsAndLruOrder) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  const L3Options o = options_for(dir.path(), 8);
  {
    auto store = open_or_die(o);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
    store->erase(key_of(5));
    store->touch(key_of(0));
    ASSERT_EQ(get(*store, 1), StoreStatus::kOk);
    // Least recently used first: 2 3 4 0 1.
    const auto synced = store->sync();  // what a persist() does last
    EXPECT_TRUE(synced.has_value()) << synced.error();
  }
  auto store = open_or_die(o);
  // A clean restart is nothing to warn about: what it recovered is in stats.
  EXPECT_TRUE(store->warnings().empty()) << joined(store->warnings());
  EXPECT_EQ(store->stats().used_blocks, 5u);
  EXPECT_EQ(store->keys().size(), 5u);
  EXPECT_FALSE(store->contains(key_of(5)));
  for (int i = 0; i < 5; ++i) {
    bool intact = false;
    EXPECT_EQ(get(*store, i, &intact), StoreStatus::kOk) << i;
    EXPECT_TRUE(intact) << i;
    EXPECT_EQ(store->lookup(key_of(i)), record_of(i));
  }
  // Reading them all again made the order 0 1 2 3 4; use 0 and 1 once more
  // so the recovered order matters: 2 3 4 0 1.
  store->touch(key_of(0));
  store->touch(key_of(1));
  for (int i = 5; i < 8; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  EXPECT_EQ(store->stats().evictions, 0) << "the three free slots were found again";
  ASSERT_EQ(put(*store, 8), StoreStatus::kOk);
  EXPECT_FALSE(store->contains(key_of(2)));
  ASSERT_EQ(put(*store, 9), StoreStatus::kOk);
  EXPECT_FALSE(store->contains(key_of(3)));
  EXPECT_EQ(store->stats().evictions, 2);
  for (int i : {0, 1, 4, 5, 6, 7, 8, 9}) EXPECT_TRUE(store->contains(key_of(i))) << i;
}

TEST(L3Store, LruOrderSurvivesARestart) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  const L3Options o = options_for(dir.path(), 4);
  {
    auto store = open_or_die(o);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
    store->touch(key_of(0));                      // persisted at close
    ASSERT_EQ(get(*store, 1), StoreStatus::kOk);  // persisted with the read
  }                                               // order: 2 3 0 1
  auto store = open_or_die(o);
  ASSERT_EQ(put(*store, 4), StoreStatus::kOk);
  EXPECT_FALSE(store->contains(key_of(2)));
  ASSERT_EQ(put(*store, 5), StoreStatus::kOk);
  EXPECT_FALSE(store->contains(key_of(3)));
  EXPECT_TRUE(store->contains(key_of(0)));
  EXPECT_TRUE(store->contains(key_of(1)));
}

TEST(L3Store, AnotherFormatTagBlockSizeOrCapacityDiscardsWhatNoLongerFits) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  L3Options o = options_for(dir.path(), 8);
  {
    auto store = open_or_die(o);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  }
  o.format_tag = kFormat + 1;
  {
    auto store = open_or_die(o);
    EXPECT_TRUE(contains(joined(store->warnings()), "format_tag")) << joined(store->warnings());
    EXPECT_EQ(store->stats().used_blocks, 0u);
    EXPECT_FALSE(store->contains(key_of(0)));
    for (int i = 0; i < 8; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  }
  // Half the capacity: the entries in slots 4..7 have nowhere to be.
  L3Options half = o;
  half.capacity_bytes = 4 * 8192;
  {
    auto store = open_or_die(half);
    EXPECT_TRUE(contains(joined(store->warnings()), "dropped 4 index entries"))
        << joined(store->warnings());
    EXPECT_EQ(store->stats().used_blocks, 4u);
    for (const BlockKey& k : store->keys()) {
      AlignedBuffer b;
      EXPECT_EQ(finish(*store, store->read(k, store->lookup(k)->meta, b.bytes)), StoreStatus::kOk);
      EXPECT_TRUE(holds(k, b.bytes, kBlockBytes));
    }
  }
  L3Options bigger_blocks = o;
  bigger_blocks.block_bytes = 6000;
  auto store = open_or_die(bigger_blocks);
  EXPECT_TRUE(contains(joined(store->warnings()), "block_bytes 5000")) << joined(store->warnings());
  EXPECT_EQ(store->stats().used_blocks, 0u);
}

TEST(L3Store, EvictsLeastRecentlyUsedButNeverProtectedOrBeingRead) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  L3Options o = options_for(dir.path(), 4);
  o.submit_batch = 64;  // nothing reaches the kernel before flush/poll/drain
  auto store = open_or_die(o);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  store->set_protected(key_of(0), true);
  const auto slot_of_1 = store->slot_offset(key_of(1));
  ASSERT_TRUE(slot_of_1);

  ASSERT_EQ(put(*store, 4), StoreStatus::kOk);  // LRU is 0, but 0 is protected
  EXPECT_TRUE(store->contains(key_of(0)));
  EXPECT_FALSE(store->contains(key_of(1)));
  EXPECT_EQ(store->slot_offset(key_of(4)), slot_of_1) << "the victim's slot is reused";
  EXPECT_EQ(store->stats().evictions, 1);
  EXPECT_EQ(store->take_evicted(), std::vector<BlockKey>{key_of(1)}) << "reported once";
  EXPECT_TRUE(store->take_evicted().empty());

  // The victim leaves the index before its slot is written: check the index
  // itself while the write is still queued.
  AlignedBuffer b5;
  fill_for(key_of(5), b5.bytes, kBlockBytes);
  const auto t5 = store->write(record_of(5), b5.bytes);
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(
        rocksdb::DB::OpenForReadOnly(rocksdb::Options(), (dir.path() / "index").string(), &raw)
            .ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string value;
    EXPECT_TRUE(db->Get({}, L3Index::encode_key(key_of(2)), &value).IsNotFound());
    EXPECT_TRUE(db->Get({}, L3Index::encode_key(key_of(3)), &value).ok());
    EXPECT_TRUE(db->Get({}, L3Index::encode_key(key_of(5)), &value).IsNotFound())
        << "committed only after its write";
  }
  ASSERT_EQ(finish(*store, t5), StoreStatus::kOk);

  // Left: 0 (protected), 3, 4, 5. Protect 3 and 4, and pin 5 with a read.
  store->set_protected(key_of(3), true);
  store->set_protected(key_of(4), true);
  AlignedBuffer r5, b6;
  const auto read5 = store->read(key_of(5), meta_of(5), r5.bytes);
  fill_for(key_of(6), b6.bytes, kBlockBytes);
  const auto t6 = store->write(record_of(6), b6.bytes);
  auto done = finish_all(*store);
  EXPECT_EQ(done.at(t6).status, StoreStatus::kNoSpace);
  EXPECT_EQ(done.at(read5).status, StoreStatus::kOk);
  EXPECT_TRUE(holds(key_of(5), r5.bytes, kBlockBytes));
  EXPECT_EQ(store->stats().dropped_writes, 1);

  store->set_protected(key_of(3), false);
  ASSERT_EQ(put(*store, 6), StoreStatus::kOk);
  EXPECT_FALSE(store->contains(key_of(3)));
  EXPECT_EQ(store->take_evicted(), (std::vector<BlockKey>{key_of(2), key_of(3)}));
  for (int i : {0, 4, 5, 6}) EXPECT_TRUE(store->contains(key_of(i))) << i;
}

TEST(L3Store, EraseFreesTheSlotAndAWriteInFlightIsDropped) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  L3Options o = options_for(dir.path(), 2);
  o.submit_batch = 64;
  auto store = open_or_die(o);
  ASSERT_EQ(put(*store, 0), StoreStatus::kOk);
  store->erase(key_of(0));
  EXPECT_FALSE(store->contains(key_of(0)));
  EXPECT_EQ(store->stats().used_blocks, 0u);

  AlignedBuffer b1;
  fill_for(key_of(1), b1.bytes, kBlockBytes);
  const auto t1 = store->write(record_of(1), b1.bytes);
  const auto again = store->write(record_of(1), b1.bytes);  // already being written
  store->erase(key_of(1));
  auto done = finish_all(*store);
  EXPECT_EQ(done.at(t1).status, StoreStatus::kOk);
  EXPECT_EQ(done.at(again).status, StoreStatus::kOk);
  EXPECT_EQ(store->stats().writes, 2) << "one transfer for block 0, one for block 1";
  EXPECT_FALSE(store->contains(key_of(1)));
  EXPECT_EQ(store->stats().used_blocks, 0u);

  ASSERT_EQ(put(*store, 2), StoreStatus::kOk);
  ASSERT_EQ(put(*store, 3), StoreStatus::kOk);
  EXPECT_EQ(store->stats().evictions, 0) << "both slots came back";
  store->erase(key_of(42));  // unknown: ignored
}

TEST(L3Store, CorruptedPayloadIsAMissCountedAndRemoved) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  const L3Options o = options_for(dir.path(), 4);
  {
    auto store = open_or_die(o);
    ASSERT_EQ(put(*store, 0), StoreStatus::kOk);
    ASSERT_EQ(put(*store, 1), StoreStatus::kOk);
    const auto offset = store->slot_offset(key_of(1));
    ASSERT_TRUE(offset);
    const int fd = ::open((dir.path() / "slab").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char junk[16] = {'\xAA', '\xAA', '\xAA', '\xAA'};
    ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(*offset + 100)), 16);
    ::close(fd);

    bool intact = true;
    EXPECT_EQ(get(*store, 1, &intact), StoreStatus::kChecksumMismatch);
    EXPECT_FALSE(intact);
    EXPECT_EQ(store->stats().checksum_failures, 1);
    EXPECT_FALSE(store->contains(key_of(1)));
    EXPECT_EQ(get(*store, 1), StoreStatus::kNotFound);
    EXPECT_EQ(get(*store, 0, &intact), StoreStatus::kOk);
    EXPECT_TRUE(intact);
    // Its slot is free once, not twice: the next two writes get a slot each.
    ASSERT_EQ(put(*store, 2), StoreStatus::kOk);
    ASSERT_EQ(put(*store, 3), StoreStatus::kOk);
    EXPECT_NE(store->slot_offset(key_of(2)), store->slot_offset(key_of(3)));
    for (int i : {2, 3}) {
      EXPECT_EQ(get(*store, i, &intact), StoreStatus::kOk) << i;
      EXPECT_TRUE(intact) << i;
    }
    EXPECT_EQ(store->stats().used_blocks, 3u);
  }
  auto store = open_or_die(o);
  EXPECT_FALSE(store->contains(key_of(1))) << "removed from the index too";
  for (int i : {0, 2, 3}) EXPECT_TRUE(store->contains(key_of(i))) << i;
}

// A block read in pieces lands whole and verified, like a whole read; a
// damaged piece fails the whole block.
TEST(L3Store, ReadInPartsLandsEveryPieceAndChecksTheWholeBlock) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  constexpr int kParts = 4;
  constexpr std::size_t kBytes = kParts * 4096;
  constexpr int kBlocks = 12;
  L3Options o = options_for(dir.path(), kBlocks);
  o.block_bytes = kBytes;
  o.capacity_bytes = kBlocks * kBytes;
  auto store = open_or_die(o);
  for (int i = 0; i < kBlocks; ++i) {
    AlignedBuffer b(kBytes);
    fill_for(key_of(i), b.bytes, kBytes);
    ASSERT_EQ(finish(*store, store->write(record_of(i), b.bytes)), StoreStatus::kOk);
  }
  // Damage the third piece of the last block.
  const auto offset = store->slot_offset(key_of(kBlocks - 1));
  ASSERT_TRUE(offset);
  const int fd = ::open((dir.path() / "slab").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char junk[8] = {'\x5A', '\x5A', '\x5A', '\x5A', '\x5A', '\x5A', '\x5A', '\x5A'};
  ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(*offset + 2 * 4096 + 9)), 8);
  ::close(fd);

  std::vector<AlignedBuffer> bufs;
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < kBlocks; ++i) {
    bufs.emplace_back(kBytes);
    std::memset(bufs.back().bytes, 0, kBytes);
    tickets.push_back(store->read(key_of(i), meta_of(i), bufs.back().bytes, kParts));
    // Held back until flush(): nothing of it has landed.
    ASSERT_EQ(store->landed(tickets.back()), std::optional<int>(0));
  }
  store->flush();
  // Pieces land in order of piece across blocks, so the count of leading
  // pieces only grows, and the read leaves flight once all four are in.
  std::vector<int> seen(kBlocks, 0);
  for (bool busy = true; busy;) {
    busy = false;
    for (int i = 0; i < kBlocks; ++i) {
      const std::optional<int> n = store->landed(tickets[static_cast<std::size_t>(i)]);
      if (!n) continue;
      busy = true;
      EXPECT_GE(*n, seen[static_cast<std::size_t>(i)]);
      EXPECT_LT(*n, kParts);
      seen[static_cast<std::size_t>(i)] = *n;
    }
  }
  const auto done = finish_all(*store);
  for (int i = 0; i < kBlocks; ++i) {
    const auto it = done.find(tickets[static_cast<std::size_t>(i)]);
    ASSERT_NE(it, done.end()) << "block " << i;
    if (i == kBlocks - 1) {
      EXPECT_EQ(it->second.status, StoreStatus::kChecksumMismatch);
    } else {
      EXPECT_EQ(it->second.status, StoreStatus::kOk) << "block " << i;
      EXPECT_TRUE(holds(key_of(i), bufs[static_cast<std::size_t>(i)].bytes, kBytes)) << i;
    }
  }
  EXPECT_EQ(store->stats().checksum_failures, 1);
  EXPECT_EQ(store->stats().reads, kBlocks - 1);
  EXPECT_FALSE(store->contains(key_of(kBlocks - 1)));
}

// A store that checks pieces apart reads only the pieces asked for and
// checks each: bytes left out are never touched, a damaged piece that is
// read fails the block, one that is skipped does not, and the pieces'
// checksums survive a restart. An entry written whole (before pieces) is read
// whole whatever the skip.
TEST(L3Store, ReadSkippingPiecesReadsAndChecksOnlyThoseAsked) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  constexpr int kParts = 4;
  constexpr std::size_t kBytes = kParts * 4096;
  L3Options whole = options_for(dir.path(), 6);
  whole.block_bytes = kBytes;
  whole.capacity_bytes = 6 * kBytes;
  L3Options o = whole;
  o.checksum_parts = kParts;
  auto write = [&](L3Store& store, int i) {
    AlignedBuffer b(kBytes);
    fill_for(key_of(i), b.bytes, kBytes);
    return finish(store, store.write(record_of(i), b.bytes));
  };
  {
    auto store = open_or_die(whole);  // block 5 is written with one checksum
    ASSERT_EQ(write(*store, 5), StoreStatus::kOk);
  }
  auto store = open_or_die(o);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(write(*store, i), StoreStatus::kOk);
  // Damage the second piece of block 1 and of block 2.
  const int fd = ::open((dir.path() / "slab").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  for (int i : {1, 2}) {
    const auto offset = store->slot_offset(key_of(i));
    ASSERT_TRUE(offset);
    const char junk[4] = {'\x5A', '\x5A', '\x5A', '\x5A'};
    ASSERT_EQ(::pwrite(fd, junk, sizeof junk, static_cast<off_t>(*offset + 4096 + 17)), 4);
  }
  ::close(fd);

  // Pieces 1 and 2 left out: the buffer keeps its 0xEE there.
  constexpr std::uint64_t kSkip = 0b0110;
  auto read = [&](int i, AlignedBuffer& b) {
    std::memset(b.bytes, 0xEE, kBytes);
    const std::uint64_t ticket = store->read(key_of(i), meta_of(i), b.bytes, kParts, kSkip);
    store->flush();
    return finish(*store, ticket);
  };
  std::vector<std::byte> want(kBytes);
  AlignedBuffer b(kBytes);
  for (int i : {0, 1}) {
    ASSERT_EQ(read(i, b), StoreStatus::kOk) << i;
    fill_for(key_of(i), want.data(), kBytes);
    for (int part = 0; part < kParts; ++part) {
      const std::byte* got = b.bytes + part * 4096;
      if (kSkip >> part & 1)
        EXPECT_TRUE(std::all_of(got, got + 4096, [](std::byte x) { return x == std::byte{0xEE}; }))
            << "block " << i << " piece " << part << " was read";
      else
        EXPECT_EQ(std::memcmp(got, want.data() + part * 4096, 4096), 0) << i << " " << part;
    }
  }
  StoreStats stats = store->stats();
  EXPECT_EQ(stats.reads, 2);
  EXPECT_EQ(stats.read_bytes, static_cast<long>(2 * kBytes / 2));
  EXPECT_EQ(stats.skipped_bytes, static_cast<long>(2 * kBytes / 2));
  // Reading the damaged piece fails the block.
  AlignedBuffer whole_read(kBytes);
  EXPECT_EQ(finish(*store, store->read(key_of(2), meta_of(2), whole_read.bytes, kParts)),
            StoreStatus::kChecksumMismatch);
  EXPECT_EQ(store->stats().checksum_failures, 1);
  // The entry from before pieces: read whole, skip or not.
  ASSERT_EQ(read(5, b), StoreStatus::kOk);
  EXPECT_TRUE(holds(key_of(5), b.bytes, kBytes));
  EXPECT_EQ(store->stats().skipped_bytes, stats.skipped_bytes);

  store.reset();
  store = open_or_die(o);
  ASSERT_EQ(read(0, b), StoreStatus::kOk) << "the pieces' checksums came back from the index";
  EXPECT_EQ(store->stats().skipped_bytes, static_cast<long>(kBytes / 2));
  ASSERT_EQ(read(1, b), StoreStatus::kOk) << "its damage is in a piece not read";
  EXPECT_EQ(finish(*store, store->read(key_of(1), meta_of(1), b.bytes, 1)),
            StoreStatus::kChecksumMismatch)
      << "a whole read checks every piece";
  // Every piece left out: done at once, nothing read.
  std::memset(b.bytes, 0xEE, kBytes);
  const long skipped = store->stats().skipped_bytes;
  EXPECT_EQ(finish(*store, store->read(key_of(0), meta_of(0), b.bytes, kParts, 0b1111)),
            StoreStatus::kOk);
  EXPECT_EQ(store->stats().skipped_bytes, skipped + static_cast<long>(kBytes));
  EXPECT_TRUE(
      std::all_of(b.bytes, b.bytes + kBytes, [](std::byte x) { return x == std::byte{0xEE}; }));
}

TEST(L3Store, OpenErrorsAreMessagesNotCrashes) {
  TempDir dir;
  const auto file = dir.write("plain", "x");
  // Under a regular file: ENOTDIR, even for root.
  auto under_file = L3Store::open(options_for(file / "l3", 4));
  ASSERT_FALSE(under_file);
  EXPECT_TRUE(contains(under_file.error(), "cannot create directory")) << under_file.error();

  L3Options tiny = options_for(dir.path() / "tiny", 1);
  tiny.capacity_bytes = 8191;
  auto no_slot = L3Store::open(tiny);
  ASSERT_FALSE(no_slot);
  EXPECT_TRUE(contains(no_slot.error(), "holds no 8192-byte slot")) << no_slot.error();

  L3Options empty = options_for(dir.path() / "empty", 4);
  empty.block_bytes = 0;
  EXPECT_FALSE(L3Store::open(empty));

  L3Options odd = options_for(dir.path() / "odd", 4);  // 5000 bytes: no whole pages
  odd.checksum_parts = 2;
  auto pieces = L3Store::open(odd);
  ASSERT_FALSE(pieces);
  EXPECT_TRUE(contains(pieces.error(), "checksum_parts 2")) << pieces.error();
}

// ---- a damaged index ----------------------------------------------------------

TEST(L3Store, EveryKindOfIndexDamageIsMovedAsideAndTheStoreStartsEmpty) {
  SKIP_WITHOUT_IO_URING();
  // A deleted index directory beside its slab is not damage the index can
  // see: the store says the index is missing.
  std::vector<test_util::IndexDamage> kinds = test_util::index_damage_kinds();
  kinds.push_back({"the index directory deleted",
                   [](const std::filesystem::path& index) { std::filesystem::remove_all(index); }});
  for (const test_util::IndexDamage& damage : kinds) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    const L3Options o = options_for(dir.path(), 8);
    const auto index = dir.path() / "index";
    const auto aside = dir.path() / "index.damaged";
    {
      auto store = open_or_die(o);
      for (int i = 0; i < 3; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
    }
    const bool deleted = std::string(damage.name) == "the index directory deleted";
    // Twice: a second damage replaces the first one's copy.
    for (int round = 0; round < 2; ++round) {
      damage.apply(index);
      auto store = L3Store::open(o);
      ASSERT_TRUE(store) << store.error();
      const std::string warnings = joined((*store)->warnings());
      if (deleted) {
        EXPECT_TRUE(contains(warnings, "index " + index.string() + " is missing")) << warnings;
        EXPECT_FALSE(std::filesystem::exists(aside));
      } else {
        EXPECT_TRUE(contains(warnings, "index " + index.string() + " is damaged")) << warnings;
        EXPECT_TRUE(contains(warnings, "moved to " + aside.string() + ", L3 starts empty"))
            << warnings;
        EXPECT_TRUE(std::filesystem::exists(aside));
      }
      EXPECT_TRUE((*store)->keys().empty());
      ASSERT_EQ(put(**store, 10 + round), StoreStatus::kOk);
      bool intact = false;
      EXPECT_EQ(get(**store, 10 + round, &intact), StoreStatus::kOk);
      EXPECT_TRUE(intact);
    }
    int beside = 0;  // index, and at most one copy of a damaged one
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      beside += e.path().filename().string().starts_with("index") ? 1 : 0;
    EXPECT_EQ(beside, deleted ? 1 : 2);
    // The new index is an index like any other.
    auto store = open_or_die(o);
    EXPECT_FALSE(contains(joined(store->warnings()), "damaged"));
    EXPECT_EQ(store->keys(), std::vector<BlockKey>{key_of(11)});
  }
}

// ---- a small file system, filled (tests/small_fs.h) ----------------------------

using test_util::SmallFs;

std::uint64_t size_of(const std::filesystem::path& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

TEST(L3Store, CapacityBeyondTheFreeSpaceIsRefusedAndTakesNothing) {
  SKIP_WITHOUT_IO_URING();
  SmallFs fs(SmallFs::Kind::kExt4, 48 << 20);
  SKIP_WITHOUT_SMALL_FS(fs);
  // A new store: refused, nothing left behind, not a byte taken.
  const auto fresh = fs.path() / "fresh";
  std::filesystem::create_directories(fresh);
  std::uint64_t free = fs.free_bytes();
  auto refused = L3Store::open(options_for(fresh, (free + (1 << 20)) / 8192));
  ASSERT_FALSE(refused);
  EXPECT_TRUE(contains(refused.error(), "not enough free space in " + fresh.string()))
      << refused.error();
  EXPECT_TRUE(contains(refused.error(), std::to_string(free) + " bytes are free"));
  EXPECT_FALSE(std::filesystem::exists(fresh / "slab"));
  EXPECT_EQ(fs.free_bytes(), free);

  // A store from an earlier run asked to grow past the free space: refused,
  // and it keeps its size and its blocks.
  const auto dir = fs.path() / "l3";
  {
    auto store = open_or_die(options_for(dir, 32));
    for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  }
  free = fs.free_bytes();
  refused = L3Store::open(options_for(dir, 32 + (free + (1 << 20)) / 8192));
  ASSERT_FALSE(refused);
  EXPECT_TRUE(contains(refused.error(), std::to_string(free) + " bytes are free"));
  EXPECT_EQ(size_of(dir / "slab"), 32u * 8192);
  EXPECT_EQ(fs.free_bytes(), free);
  auto store = open_or_die(options_for(dir, 32));
  for (int i = 0; i < 4; ++i) {
    bool intact = false;
    EXPECT_EQ(get(*store, i, &intact), StoreStatus::kOk) << i;
    EXPECT_TRUE(intact) << i;
  }
}

// The child of NearlyFullFileSystemIsAnErrorNotAnAbort: opens a 1 MiB store
// in the directory it is given.
TEST(L3StoreChild, OpenOnANearlyFullFileSystemIsRefused) {
  const char* dir = test_util::child_argument();
  if (dir == nullptr) GTEST_SKIP() << "runs only as the child of NearlyFullFileSystem...";
  auto store = L3Store::open(options_for(dir, 128));
  ASSERT_FALSE(store) << "opened with " << test_util::free_bytes(dir) << " bytes free";
  EXPECT_TRUE(contains(store.error(), "not enough free space")) << store.error();
}

TEST(L3Store, NearlyFullFileSystemIsAnErrorNotAnAbort) {
  SKIP_WITHOUT_IO_URING();
  for (const auto kind : {SmallFs::Kind::kExt4, SmallFs::Kind::kTmpfs}) {
    SmallFs fs(kind, 48 << 20);
    SKIP_WITHOUT_SMALL_FS(fs);
    // RocksDB aborted the process with 64 KiB to 4 MiB left on ext4. (The
    // directories first: with nothing left, not even they can be made.)
    const std::uint64_t leaves[] = {0 << 10, 64 << 10, 256 << 10, 512 << 10, 4 << 20};
    for (const std::uint64_t leave : leaves)
      std::filesystem::create_directories(fs.path() / ("l3-" + std::to_string(leave)));
    for (const std::uint64_t leave : leaves) {
      const auto dir = fs.path() / ("l3-" + std::to_string(leave));
      fs.unfill();
      fs.fill_leaving(leave);
      EXPECT_TRUE(test_util::passes_in_child("L3StoreChild.OpenOnANearlyFullFileSystemIsRefused",
                                             dir.string()))
          << (kind == SmallFs::Kind::kExt4 ? "ext4" : "tmpfs") << ", " << leave << " bytes left";
    }
  }
}

// The child of FileSystemFillingUpWhileRunning...: a store on the small
// file system mounted at the path it is given, which it fills up.
TEST(L3StoreChild, FileSystemFillsUpUnderARunningStore) {
  const char* mount = test_util::child_argument();
  if (mount == nullptr) GTEST_SKIP() << "runs only as the child of FileSystemFillingUp...";
  const auto dir = std::filesystem::path(mount) / "l3";
  auto now = std::make_shared<std::chrono::steady_clock::time_point>();
  const L3Options o = options_on_a_manual_clock(dir, 64, now);
  {
    auto store = open_or_die(o);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);
  }
  // Reopened, the index has flushed its log: its memtable is empty when the
  // disk fills, the case in which RocksDB's own Resume() aborts.
  auto store = open_or_die(o);
  ASSERT_EQ(store->keys().size(), 4u);
  test_util::fill_leaving(mount, 0);

  // The payload lands in the preallocated slab; the index's log cannot grow.
  int i = 4;
  StoreStatus st = StoreStatus::kOk;
  while (i < 64 && (st = put(*store, i)) == StoreStatus::kOk) ++i;
  EXPECT_EQ(st, StoreStatus::kIoError) << "writes kept working with the file system full";
  EXPECT_FALSE(store->stats().available);
  EXPECT_FALSE(store->contains(key_of(i)));
  EXPECT_EQ(put(*store, 100), StoreStatus::kUnavailable);
  EXPECT_EQ(get(*store, 0), StoreStatus::kUnavailable);
  auto synced = store->sync();
  EXPECT_FALSE(synced) << "synced an index whose write failed";
  // Still full: the probe finds no room to reopen the index.
  *now += 5ms;
  EXPECT_EQ(put(*store, 100), StoreStatus::kUnavailable);
  EXPECT_FALSE(store->stats().available);

  // Space again: the next probe reopens the index and goes through.
  test_util::unfill(mount);
  *now += 10ms;
  EXPECT_EQ(put(*store, 100), StoreStatus::kOk);
  EXPECT_TRUE(store->stats().available);
  for (const int k : {0, 1, 2, 3, 100}) {
    bool intact = false;
    EXPECT_EQ(get(*store, k, &intact), StoreStatus::kOk) << k;
    EXPECT_TRUE(intact) << k;
  }
  EXPECT_TRUE(store->sync());
  const auto before = store->keys().size();
  store.reset();
  store = open_or_die(o);
  EXPECT_EQ(store->keys().size(), before);
  for (const int k : {0, 3, 100}) {
    bool intact = false;
    EXPECT_EQ(get(*store, k, &intact), StoreStatus::kOk) << k;
    EXPECT_TRUE(intact) << k;
  }
}

TEST(L3Store, FileSystemFillingUpWhileRunningFailsWritesThenRecovers) {
  SKIP_WITHOUT_IO_URING();
  for (const auto kind : {SmallFs::Kind::kExt4, SmallFs::Kind::kTmpfs}) {
    SmallFs fs(kind, 48 << 20);
    SKIP_WITHOUT_SMALL_FS(fs);
    EXPECT_TRUE(test_util::passes_in_child("L3StoreChild.FileSystemFillsUpUnderARunningStore",
                                           fs.path().string()))
        << (kind == SmallFs::Kind::kExt4 ? "ext4" : "tmpfs");
  }
}

// Runs `body` in a forked child and returns its exit status (the child
// reports what went wrong through it), or -1 if it did not exit normally.
int in_child(const std::function<int()>& body) {
  auto child = util::fork_child(body);
  if (!child) return -1;
  const int status = child->wait();
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(L3Store, FileSizeLimitFailsAllocationThenWritesThenOpensTheBreaker) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  // RLIMIT_FSIZE is per process, so the limits go on in a child.
  const int rc = in_child([&]() -> int {
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead
    rlimit limit{};
    if (::getrlimit(RLIMIT_FSIZE, &limit) != 0) return 2;
    const rlim_t unlimited = limit.rlim_cur;
    limit.rlim_cur = 1 << 20;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
    L3Options big = options_for(dir.path() / "big", 2048);  // 16 MiB cannot be allocated
    auto refused = L3Store::open(big);
    if (refused) return 10;
    if (refused.error().find("fallocate") == std::string::npos) return 11;
    if (std::filesystem::exists(dir.path() / "big" / "slab")) return 13;  // nothing left behind

    limit.rlim_cur = unlimited;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 4;
    L3Options small = options_for(dir.path() / "small", 32);  // 256 KiB: allocated
    small.backoff_initial = std::chrono::hours(1);
    auto store = L3Store::open(small);
    if (!store) return 12;
    limit.rlim_cur = 64 << 10;  // now only the first 8 slots can be written
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 5;
    for (int i = 0; i < 8; ++i)
      if (put(**store, i) != StoreStatus::kOk) return 20 + i;
    if (put(**store, 8) != StoreStatus::kIoError) return 40;
    StoreStats st = (*store)->stats();
    if (st.io_errors != 1 || st.available) return 41;
    if ((*store)->contains(key_of(8))) return 42;
    if (put(**store, 9) != StoreStatus::kUnavailable) return 43;
    if (get(**store, 0) != StoreStatus::kUnavailable) return 44;
    st = (*store)->stats();
    if (st.dropped_writes != 1 || st.io_errors != 1) return 45;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "child's exit code: see the return statements above";
}

TEST(L3Store, TruncatedSlabOpensTheBreakerAndAProbeClosesIt) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  auto now = std::make_shared<std::chrono::steady_clock::time_point>();
  const L3Options o = options_on_a_manual_clock(dir.path(), 8, now);
  auto store = open_or_die(o);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(put(*store, i), StoreStatus::kOk);

  const std::string slab = (dir.path() / "slab").string();
  ASSERT_EQ(::truncate(slab.c_str(), 0), 0);  // reads now come back short
  EXPECT_EQ(get(*store, 0), StoreStatus::kIoError);
  StoreStats st = store->stats();
  EXPECT_EQ(st.io_errors, 1);
  EXPECT_FALSE(st.available);
  EXPECT_TRUE(store->contains(key_of(0))) << "an I/O error says nothing about the bytes";

  // Open: nothing touches the disk.
  EXPECT_EQ(get(*store, 1), StoreStatus::kUnavailable);
  EXPECT_EQ(put(*store, 4), StoreStatus::kUnavailable);
  st = store->stats();
  EXPECT_EQ(st.dropped_writes, 1);
  EXPECT_EQ(st.io_errors, 1);

  // After the backoff one probe goes through; it fails, and the wait doubles.
  *now += 5ms;
  EXPECT_EQ(get(*store, 1), StoreStatus::kIoError);
  EXPECT_EQ(store->stats().io_errors, 2);
  *now += 5ms;
  EXPECT_EQ(get(*store, 1), StoreStatus::kUnavailable) << "backoff is 10 ms now";
  *now += 5ms;

  // The file is back (its old bytes are not): the next probe succeeds.
  ASSERT_EQ(::truncate(slab.c_str(), 8 * 8192), 0);
  EXPECT_EQ(put(*store, 4), StoreStatus::kOk);
  EXPECT_TRUE(store->stats().available);
  bool intact = false;
  EXPECT_EQ(get(*store, 4, &intact), StoreStatus::kOk);
  EXPECT_TRUE(intact);
  EXPECT_EQ(get(*store, 0), StoreStatus::kChecksumMismatch) << "zeros where block 0 was";
}

// ---- killed at random moments ------------------------------------------------

constexpr char kCrashChildEnv[] = "KVTIER_L3_CRASH_CHILD";

L3Options crash_options(const std::string& dir) {
  L3Options o = options_for(dir, 16);
  o.submit_batch = 2;
  return o;
}

// The crash test's child: this test binary run again with only this test
// selected and the environment saying where to write. It writes, reads,
// erases and touches blocks until it is killed; eviction keeps slots turning
// over. Skipped in an ordinary run.
TEST(L3StoreCrashChild, WritesUntilKilled) {
  const char* env = std::getenv(kCrashChildEnv);
  if (env == nullptr) GTEST_SKIP() << "runs only as the child of KilledAtRandomMoments";
  std::string dir;
  std::uint64_t base = 0;
  int ready_fd = -1;
  {
    const std::string spec = env;
    const auto a = spec.find('|'), b = spec.rfind('|');
    dir = spec.substr(0, a);
    base = std::stoull(spec.substr(a + 1, b - a - 1));
    ready_fd = std::stoi(spec.substr(b + 1));
  }
  auto opened = L3Store::open(crash_options(dir));
  if (!opened) ::_exit(3);
  L3Store& store = **opened;
  if (::write(ready_fd, "r", 1) != 1) ::_exit(4);

  constexpr int kBuffers = 8;
  std::vector<AlignedBuffer> buffers(kBuffers);
  std::vector<int> idle;
  for (int b = 0; b < kBuffers; ++b) idle.push_back(b);
  std::unordered_map<std::uint64_t, int> busy;  // ticket -> buffer
  for (std::uint64_t n = 0;; ++n) {
    for (const StoreCompletion& c : store.poll()) {
      if (auto it = busy.find(c.ticket); it != busy.end()) {
        idle.push_back(it->second);
        busy.erase(it);
      }
    }
    if (idle.empty()) {
      store.drain();
      continue;
    }
    const int b = idle.back();
    idle.pop_back();
    std::uint64_t ticket = 0;
    if (n % 7 == 3) {
      ticket = store.read(key_of(base + n - 2), meta_of(base + n - 2), buffers[b].bytes);
    } else {
      fill_for(key_of(base + n), buffers[b].bytes, kBlockBytes);
      ticket = store.write(record_of(base + n), buffers[b].bytes);
    }
    busy[ticket] = b;
    if (n % 5 == 4) store.erase(key_of(base + n - 3));
    if (n % 11 == 0) store.touch(key_of(base + n / 2));
  }
}

TEST(L3Store, KilledAtRandomMomentsLeavesOnlyEntriesThatReadBackIntact) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir;
  const std::string store_dir = (dir.path() / "l3").string();
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  std::mt19937 rng(20240607);
  std::uniform_int_distribution<int> pause_us(0, 20000);
  int verified = 0;
  for (int round = 0; round < 20; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    // A fresh process rather than a bare fork(): the child needs working
    // RocksDB background threads, which a fork of this process would lack.
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    auto child = util::spawn_child(
        {self, "--gtest_filter=L3StoreCrashChild.WritesUntilKilled"},
        {.stdout_fd = null,
         .env = test_util::child_environment(std::string(kCrashChildEnv) + "=" + store_dir + "|" +
                                             std::to_string((round + 1) * 1000000ull) + "|" +
                                             std::to_string(ready[1]))});
    ::close(null);
    ::close(ready[1]);
    ASSERT_TRUE(child) << child.error();
    char c = 0;
    const bool started = ::read(ready[0], &c, 1) == 1;
    ::close(ready[0]);
    if (started) std::this_thread::sleep_for(std::chrono::microseconds(pause_us(rng)));
    const int status = child->stop(std::chrono::milliseconds(0)).status;  // SIGKILL: a crash
    ASSERT_TRUE(started) << "round " << round << ": the child did not start, status " << status;

    auto store = L3Store::open(crash_options(store_dir));
    ASSERT_TRUE(store) << store.error();
    for (const BlockKey& key : (*store)->keys()) {
      const auto record = (*store)->lookup(key);
      ASSERT_TRUE(record);
      ASSERT_EQ(record->meta.size(), 16u);
      const std::uint64_t id = id_of(*record);
      EXPECT_EQ(*record, record_of(id)) << "round " << round;
      AlignedBuffer b;
      const StoreStatus st = finish(**store, (*store)->read(key, meta_of(id), b.bytes));
      EXPECT_EQ(st, StoreStatus::kOk) << "round " << round << " block " << id;
      EXPECT_TRUE(holds(key, b.bytes, kBlockBytes)) << "round " << round << " block " << id;
      ++verified;
    }
  }
  EXPECT_GT(verified, 0) << "no round left anything to check";
}

}  // namespace
}  // namespace kvtier::tiers
