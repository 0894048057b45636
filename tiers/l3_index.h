// The L3 store's index: which block lives in which slab slot, kept in RocksDB
// so the SSD tier survives restarts (tiers/l3_store.h combines it with the
// slab file).
//
// One RocksDB key per block: 'k' + the 128-bit key, big-endian. Its value is a
// small fixed binary encoding with a version byte (see encode_value) holding
// the slot's byte offset, the payload length and checksum (and, for a
// payload checked in pieces, each piece's), its last-use clock
// and the owner's metadata (opaque bytes, tiers/block_store.h). One more
// key, 'm', records the format the entries were written in (format_tag and
// block_bytes); an index written in another format is discarded at open,
// never served.
//
// Values are decoded defensively: a value of the wrong version or length is
// dropped with a warning and deleted, never trusted and never a crash.
//
// Writes go to RocksDB's write-ahead log without fsync: they survive the
// process being killed at any moment (the log is in the kernel's page cache
// once a write returns), and after a power loss the payload checksums catch
// an entry whose slot does not hold what it says.
//
// Damage: an index that cannot be what RocksDB wrote (the path is not a
// directory; files but no CURRENT; RocksDB says Corruption, or a file CURRENT
// or the MANIFEST names is missing; corruption met while reading the
// entries) is moved aside to <dir>.damaged, replacing an older one so that
// repeated damage cannot fill the disk, and a new, empty index takes its
// place, said in warnings. What is not damage is refused, nothing moved: an
// index another process holds (RocksDB's LOCK, seen with fcntl F_GETLK before
// RocksDB is asked), one this process has open already, a path we may not
// read, a full disk, any other error.
//
// A full disk: Debian's librocksdb is built with assertions, and three of
// its paths abort the process once a write has failed with ENOSPC: its own
// info LOG (the next line after a failed one), DB::Resume() or its own
// automatic recovery when the memtable is empty (the next write goes to the
// write-ahead log that failed; fixed in RocksDB 9.6, PR #12873), and
// SyncWAL() on that log. So the index keeps its own LOG (write(2), errors
// ignored, at most 1 MiB), turns RocksDB's recovery off, and after a failed
// write stops calling RocksDB at all (put, erase and sync fail at once)
// until recover() closes the database and opens it again, which starts a
// new log. open() and recover() first check that the file system has
// min_free_bytes free, since RocksDB needs room to open at all.
//
// Thread-safety: put, erase, sync and failed() from any thread; open's
// result and recover() REQUIRE that no other call runs at the same time
// (L3Store makes every call under its mutex).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tiers/block_key.h"
#include "tiers/block_store.h"

namespace rocksdb {
class DB;
}

namespace kvtier::tiers {

// One index entry: the record plus where and what its payload is.
struct L3Entry {
  BlockRecord record;
  std::uint64_t offset = 0;  // byte offset of its slot in the slab file
  std::uint32_t length = 0;  // payload bytes (block_bytes when written)
  // XXH3_64bits of those bytes; for a payload checked in pieces,
  // piece_checksum_of(pieces) instead.
  std::uint64_t checksum = 0;
  // Empty, or the XXH3_64bits of each of that many equal pieces of the
  // payload (L3Options::checksum_parts), so a read of some pieces can be
  // checked without the rest.
  std::vector<std::uint64_t> pieces;
  std::uint64_t last_use = 0;  // the store's LRU clock: larger is more recent

  bool operator==(const L3Entry&) const = default;
};

// The checksum of a payload checked in pieces: one hash over the pieces'
// own, so an entry still has one value that names its bytes.
std::uint64_t piece_checksum_of(std::span<const std::uint64_t> pieces);

class L3Index {
 public:
  // What open() found.
  struct Opened {
    std::unique_ptr<L3Index> index;
    std::vector<L3Entry> entries;       // every valid entry, in key order
    std::vector<std::string> warnings;  // what was discarded, and why
  };

  // Opens the RocksDB database in directory `dir`, creating it if missing.
  // An index written with another format_tag or block_bytes, or without a
  // format record, has its entries discarded (said in warnings); a damaged
  // one is moved aside (above). An error when the file system has fewer
  // than min_free_bytes free, or the database cannot be created or opened
  // (locked by another process, no permission, the disk full).
  static std::expected<Opened, std::string> open(const std::string& dir, std::uint64_t format_tag,
                                                 std::uint64_t block_bytes,
                                                 std::uint64_t min_free_bytes = 0);

  ~L3Index();
  L3Index(const L3Index&) = delete;
  L3Index& operator=(const L3Index&) = delete;

  // Inserts or replaces entries (one atomic batch); an error when RocksDB
  // refuses the write.
  std::expected<void, std::string> put(std::span<const L3Entry> entries);
  std::expected<void, std::string> put(const L3Entry& entry) { return put(std::span(&entry, 1)); }
  // Deletes entries (one atomic batch); deleting a missing key is not an error.
  std::expected<void, std::string> erase(std::span<const BlockKey> keys);
  std::expected<void, std::string> erase(const BlockKey& key) { return erase(std::span(&key, 1)); }
  // Makes every put and erase so far durable (RocksDB's SyncWAL: writes go
  // to its log unsynced, which survives the process, not the machine).
  std::expected<void, std::string> sync();

  // Whether a write has failed since the database was (re)opened: until
  // recover() succeeds, put, erase and sync fail without touching RocksDB.
  bool failed() const;
  // After a failed write: once the file system has min_free_bytes free
  // again, closes the database and opens it again (what the failed write
  // did not log is lost, which the store's checksums cover). Nothing to do,
  // and success, when no write has failed.
  std::expected<void, std::string> recover();

  // The on-disk encodings (l3_index_encoding.cpp), public for tests and
  // tools. Entries live under kEntryPrefix + their key, the format record
  // under kMetaKey.
  static constexpr char kEntryPrefix = 'k';
  static constexpr const char* kMetaKey = "m";
  struct Format {
    std::uint64_t format_tag = 0;
    std::uint64_t block_bytes = 0;
  };
  static std::string encode_meta(const Format& format);
  // nullopt for any record that is not exactly one well-formed version-1 record.
  static std::optional<Format> decode_meta(std::string_view bytes);
  static std::string encode_key(const BlockKey& key);
  static std::optional<BlockKey> decode_key(std::string_view bytes);
  static std::string encode_value(const L3Entry& entry);
  // nullopt for any value that is not exactly one well-formed version-1 value.
  static std::optional<L3Entry> decode_value(const BlockKey& key, std::string_view bytes);

 private:
  L3Index(std::string dir, std::uint64_t min_free_bytes, std::unique_ptr<rocksdb::DB> db);
  // Records a failed write; returns its message.
  std::string fail(const std::string& what, const std::string& status);
  std::expected<void, std::string> refuse_if_failed(const char* what) const;

  std::string dir_;
  std::string open_as_;  // dir_'s canonical path: this process has it open
  std::uint64_t min_free_bytes_;
  std::unique_ptr<rocksdb::DB> db_;  // null after a reopen that failed
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  std::string failure_;  // the first failed write's message; guarded by failure_mu_
};

}  // namespace kvtier::tiers
