// The L3 tier: opaque fixed-size blocks on an SSD, found again after a
// restart.
//
// Payloads live in one preallocated slab file of equal slots
// (tiers/slab_file.h, io_uring + O_DIRECT); a RocksDB index
// (tiers/l3_index.h) maps each block's key to its slot, checksum (XXH3_64bits
// of the block_bytes payload), record and last use. An in-memory map mirrors
// the index, so lookups never touch RocksDB.
//
// Invariants, which hold even if the process is killed at any moment:
//  * An index entry exists only for a slot whose payload write completed
//    successfully: the entry is committed after the write, never before.
//  * An entry is deleted from the index before its slot is written again
//    (eviction, erase), so no entry ever names bytes it did not checksum.
//  * Bytes are served only after their checksum and metadata match the
//    entry's; a mismatch removes the entry and counts it. Wrong KV is a miss,
//    never a result.
//  * Each slot is free, owned by exactly one entry (being written or stored),
//    or, after its entry went away, still being read; free slots are only
//    those with no owner and no read in flight.
//
// Failures: an I/O error (a negative or short completion, a refused
// submission, a refused index write) is counted and opens a circuit breaker
// (tiers/circuit_breaker.h).
// While it is open, write() and read() complete kUnavailable without touching
// the disk; once the backoff has passed (doubling from backoff_initial up to
// backoff_max) the next operation goes through as a probe, and its success
// closes the breaker. When an index write failed (a full disk), the probe
// first reopens the index (L3Index::recover), which waits until the file
// system has the index's headroom and the reserve free again; until then
// the probe fails without touching the disk. Nothing throws or aborts on
// I/O failure.
//
// Disk space: open() counts what it would take before taking any of it:
// what the slab still lacks (nothing for a slab allocated before at this
// size), index_headroom_bytes() for the index to grow into, and
// reserve_bytes() that the store never takes, so it cannot leave its file
// system (often the machine's) with no byte free. Short of that it refuses,
// saying how many bytes it needs and how many are free, and leaves nothing
// behind: a slab it created is removed, an older one keeps its size.
//
// Threading: write, read, erase, touch, set_protected, take_evicted, flush,
// poll and drain are called from one thread, the engine's; lookup, contains,
// stats and the accessors from any thread. The slab's completion thread verifies
// checksums, commits index entries and queues completions. One mutex (mu_)
// guards all shared state, and index writes happen under it, so the index
// sees puts and deletes in the same order as the in-memory map; checksums
// are computed outside it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tiers/block_key.h"
#include "tiers/block_store.h"
#include "tiers/circuit_breaker.h"
#include "tiers/l3_index.h"
#include "tiers/slab_file.h"
#include "util/latency_stats.h"

namespace kvtier::tiers {

struct L3Options {
  // A directory, created if missing: the slab is <path>/slab and the RocksDB
  // index <path>/index.
  std::string path;
  // Slab size. slots = capacity_bytes / slot_bytes; fewer than one fails open.
  std::size_t capacity_bytes = 0;
  // Payload bytes per block; a slot is this rounded up to 4096.
  std::size_t block_bytes = 0;
  // What the payload bytes mean (e.g. a hash of layout version, page size and
  // block_bytes). An index written with another tag or block size is
  // discarded at open (said in warnings()), never served.
  std::uint64_t format_tag = 0;
  // Payloads are checked in this many equal pieces, each with its own
  // checksum (block_bytes / checksum_parts a multiple of 4096, at most
  // kMaxParts), so that a read of some of them (read()'s skip) is checked
  // without the rest. 1: one checksum for the whole payload. Entries written
  // with another grid (or before there were pieces) stay readable whole.
  int checksum_parts = 1;
  // Transfers in the kernel at once; more wait in a queue.
  int queue_depth = 64;
  // Operations queued before write()/read() submit them by themselves;
  // flush(), poll() and drain() submit the rest. Bigger batches mean fewer
  // system calls, smaller ones less delay before the disk starts.
  int submit_batch = 16;
  // Circuit breaker: time shut after the first failure, doubling after each
  // failed probe up to backoff_max.
  std::chrono::milliseconds backoff_initial{1000}, backoff_max{30000};
  // The breaker's clock; empty means std::chrono::steady_clock::now. Tests
  // substitute one they advance by hand.
  std::function<std::chrono::steady_clock::time_point()> clock;
  // Runs on the completion thread after each transfer's completion is queued
  // for poll(), and after each piece of a read in parts lands, with no lock
  // held: lets an owner sleeping on several sources wake up. Empty: nothing.
  std::function<void()> on_completion;
};

class L3Store final : public BlockStore {
 public:
  // Opens or creates the store. Recovers used slots and LRU order from the
  // index; entries naming a slot out of range (a smaller capacity than
  // before), of another length, or a slot another entry already claims are
  // dropped, with a line in warnings(). A damaged index is moved aside and
  // the store starts empty, with a warning (tiers/l3_index.h); so does a
  // slab whose index is missing. An error when there is not the space above,
  // or the directory, slab or index cannot be created, allocated or opened
  // (another process has the index open, no permission).
  static std::expected<std::unique_ptr<L3Store>, std::string> open(const L3Options& options);

  // What open() keeps free on the file system of `path` beside the slab:
  // the smaller of 1 GiB and 5% of the file system (ext4 keeps 5% for root
  // by default; past 20 GiB, 1 GiB is room enough for the logs and
  // temporary files of a machine), never taken by L3.
  static std::uint64_t reserve_bytes(std::uint64_t filesystem_bytes);
  // And the room left for the index to grow into: 8 MiB (its write-ahead
  // logs for two 1 MiB memtables, the table a flush writes, a MANIFEST of
  // at most 1 MiB, its 1 MiB LOG) plus 1 KiB a slot (an entry takes about
  // 200 bytes at page_size 16; compaction briefly holds two copies, and
  // stale versions wait for it). An estimate: an index that outgrows it
  // fails writes, which opens the breaker; nothing worse.
  static std::uint64_t index_headroom_bytes(std::size_t num_slots);

  // Drains every operation, persists LRU order, closes.
  ~L3Store() override;
  L3Store(const L3Store&) = delete;
  L3Store& operator=(const L3Store&) = delete;

  // Starts writing `src` (block_bytes valid bytes) under record.key and
  // returns the ticket its completion will carry. REQUIRES: src is
  // 4096-aligned, slot_bytes() long, and stays valid and unchanged until the
  // completion is polled.
  //  * A key already stored, or being written, completes kOk without I/O
  //    (src is not used) and counts as a use.
  //  * With no free slot, the least recently used unprotected entry with no
  //    read in flight is evicted: deleted from the index before its slot is
  //    reused. Without one the write completes kNoSpace.
  //  * The index entry is committed only after the payload write succeeded;
  //    until then lookup() and read() do not see the key.
  std::uint64_t write(const BlockRecord& record, const std::byte* src) override;

  // Starts reading the block stored under `key` into dst. REQUIRES: dst is
  // 4096-aligned, slot_bytes() long, and valid until the completion is
  // polled; its contents are unspecified unless the completion says kOk.
  // kOk only when the payload's checksum matches and the stored metadata is
  // expected_meta; otherwise kChecksumMismatch, and the entry is removed and
  // counted. The entry cannot be evicted while the read is in flight; a read
  // counts as a use.
  //
  // parts > 1 reads the block in `parts` equal pieces (block_bytes / parts
  // bytes, a multiple of 4096), for an owner that uses a block piece by
  // piece (the engine, a layer at a time) and starts on the first pieces
  // while the rest are on the way: see landed(). The pieces of every read
  // in parts issued before the next flush() go to the disk in order of
  // piece: the first piece of each block, then the second... The checksum
  // still covers the whole block, so the completion, which comes once the
  // last piece has landed, is the only word on whether the bytes are right.
  //
  // skip (bit i: piece i) leaves pieces out: they are neither read nor
  // checked, their bytes in dst unspecified, and landed() counts them as
  // landed at once; each piece read is checked against its own checksum. A
  // read that leaves out every piece completes kOk at once, touching nothing.
  // Only an entry checked in `parts` pieces can be read so (checksum_parts);
  // any other is read whole, skip ignored. stats() counts the bytes skipped.
  // REQUIRES: 1 <= parts <= kMaxParts, and block_bytes divides as above.
  std::uint64_t read(const BlockKey& key, std::span<const std::byte> expected_meta, std::byte* dst,
                     int parts = 1, std::uint64_t skip = 0) override;
  int max_parts() const override { return kMaxParts; }
  static constexpr int kMaxParts = 64;

  // How many leading pieces of read `ticket` (one made in parts) are in its
  // buffer, unverified; nullopt once the last one has landed (or for a
  // ticket not in flight): the completion, queued for poll() right after,
  // says how the read ended.
  std::optional<int> landed(std::uint64_t ticket) const override;

  // Submits every queued operation now (write/read batch them).
  void flush() override;
  // Completions since the last call, in completion order; flushes first and
  // never blocks on I/O.
  std::vector<StoreCompletion> poll() override;
  // Blocks until every submitted operation has completed (its completion is
  // then waiting for poll()) and persists LRU order.
  void drain() override;
  // drain(), then makes what is stored durable against a power loss, not
  // only a crash of the process: the slab's data, then the index. Costs a
  // device cache flush: for a shutdown or an explicit persist, not per write.
  std::expected<void, std::string> sync() override;

  // The record of a stored entry (not of one still being written). Served
  // from memory.
  std::optional<BlockRecord> lookup(const BlockKey& key) const override;
  bool contains(const BlockKey& key) const override;
  // Removes the entry from the index, then frees its slot (once no read is
  // in flight on it). An entry still being written is dropped when its write
  // completes. Unknown keys are ignored.
  void erase(const BlockKey& key) override;
  // Marks the entry used now, for LRU. Persisted lazily: with the next read
  // of it, drain() or close.
  void touch(const BlockKey& key);
  // Protected entries are never evicted (the engine's swapped-out requests).
  // Kept in memory only: after a restart nothing is protected.
  void set_protected(const BlockKey& key, bool is_protected) override;
  // The keys of the entries write() evicted to make room since the last
  // call, oldest first: an owner that mirrors what the store holds forgets
  // them here (erase() and checksum failures it knows of already).
  std::vector<BlockKey> take_evicted() override;

  std::size_t slot_bytes() const override { return slot_bytes_; }
  std::size_t block_bytes() const override { return options_.block_bytes; }
  std::size_t capacity_blocks() const { return num_slots_; }
  // Every stored key, in no particular order: what a restart found, for
  // tools and tests (lookup() is the cheap question).
  std::vector<BlockKey> keys() const;
  // Where a stored entry's payload lies in <path>/slab, for tests and tools.
  std::optional<std::uint64_t> slot_offset(const BlockKey& key) const;
  StoreStats stats() const override;
  // Whether an operation submitted now would reach the disk: the breaker is
  // closed, or it is open but due for its probe. Cheap (callers ask per
  // request: while it is false, L3 is skipped rather than waited on).
  bool accepting() const override;
  // What open() recovered and discarded, one line each.
  std::vector<std::string> warnings() const override { return warnings_; }

 private:
  enum class EntryState { kWriting, kStored };
  struct Entry {
    BlockRecord record;
    std::uint32_t slot = 0;
    std::uint64_t checksum = 0;         // valid once kStored
    std::vector<std::uint64_t> pieces;  // its pieces' checksums (L3Entry::pieces)
    std::uint64_t last_use = 0;         // key into lru_ while kStored
    EntryState state = EntryState::kWriting;
    bool is_protected = false;
  };
  struct Slot {
    bool owned = false;  // by an entry, or by the write still filling it
    int reads = 0;       // reads in flight
  };
  struct Op {
    BlockKey key;
    bool is_write = false;
    std::uint32_t slot = 0;
    std::byte* buf = nullptr;
    std::uint64_t checksum = 0;  // reads: what the payload must hash to
    // Reads of an entry checked in pieces: each piece's checksum, and the
    // pieces not read (a bit each).
    std::vector<std::uint64_t> pieces;
    std::uint64_t skip = 0;
    bool probe = false;  // the breaker's probe
    std::chrono::steady_clock::time_point start;
    // Reads in parts: pieces still in the disk, which have landed (a bit
    // each), how many lead without a gap, and whether one came up short.
    int parts = 1;
    int parts_left = 1;
    std::uint64_t landed_mask = 0;
    int landed = 0;
    bool short_transfer = false;

    // Marks pieces landed (or skipped) and counts those that lead.
    void land(std::uint64_t pieces) {
      landed_mask |= pieces;
      while (landed < parts && (landed_mask >> landed & 1) != 0) ++landed;
    }
  };
  // A piece of a read in parts, held back until flush() orders them.
  struct Piece {
    int part;
    std::uint32_t slot;
    std::size_t bytes;
    std::byte* dst;  // where the piece goes: the block's buffer + part * bytes
    std::uint64_t tag;
  };
  L3Store(const L3Options& options, std::size_t slot_bytes, std::size_t num_slots);
  // open()'s parts (l3_store_open.cpp). The bytes to keep free beside the
  // slab, or why the file system cannot hold the store.
  static std::expected<std::uint64_t, std::string> check_space(const std::string& path,
                                                               const std::string& slab_path,
                                                               std::size_t num_slots,
                                                               std::size_t slot_bytes);
  // Takes the index's entries that name a whole, unclaimed slot in range;
  // the others are dropped from the index, with a warning.
  std::expected<void, std::string> recover(std::vector<L3Entry>& entries);
  std::expected<void, std::string> open_slab(const std::string& path, std::uint64_t keep_free);

  // The rest REQUIRE mu_ held.
  // Whether an operation may touch the disk now; marks it as the probe when
  // the breaker is half open.
  bool admit_locked(bool& probe);
  void complete_locked(std::uint64_t ticket, const BlockKey& key, bool is_write, StoreStatus status,
                       std::chrono::nanoseconds latency = {}, std::size_t skipped_bytes = 0);
  // A free slot, evicting the LRU victim if need be: nullopt (with *error
  // set when the index refused the delete) if none can be had.
  std::optional<std::uint32_t> take_slot_locked(bool& index_error);
  // Drops a stored entry from the index and memory and releases its slot.
  bool remove_stored_locked(const BlockKey& key);
  void release_slot_locked(std::uint32_t slot);
  void use_locked(Entry& entry);
  L3Entry index_entry_locked(const Entry& entry) const;
  void persist_touched_locked();

  // Completion-thread callbacks from the slab. A slab tag is ticket *
  // kMaxParts + piece (0 for a whole block).
  void on_io_complete(std::uint64_t tag, int result);
  // A whole write or read has landed (`transferred`: every byte): commits
  // the write with its checksums, or completes the read as `intact` says
  // (every piece read matched its checksum).
  void finish_write_locked(std::uint64_t ticket, const Op& op, bool transferred,
                           std::uint64_t checksum, std::vector<std::uint64_t> pieces,
                           std::chrono::nanoseconds latency);
  void finish_read_locked(std::uint64_t ticket, const Op& op, bool transferred, bool intact,
                          std::chrono::nanoseconds latency);
  // The bytes a read leaves out with `skip`, in pieces of `parts`.
  std::size_t skipped_bytes(int parts, std::uint64_t skip) const;
  void on_submit_error(int error);

  L3Options options_;
  std::size_t slot_bytes_;
  std::size_t num_slots_;
  std::vector<std::string> warnings_;  // written by open() only
  std::unique_ptr<L3Index> index_;
  std::unique_ptr<SlabFile> slab_;  // declared last: destroyed (drained) first
  std::uint64_t next_ticket_ = 1;   // engine thread only
  std::vector<Piece> pieces_;       // engine thread only

  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<BlockKey, Entry, BlockKeyHash> entries_;
  // (last_use, key) of every stored entry, least recently used first. The
  // key breaks ties, which only a damaged index can create.
  std::set<std::pair<std::uint64_t, BlockKey>> lru_;
  std::uint64_t clock_ = 1;                             // next last_use
  std::unordered_set<BlockKey, BlockKeyHash> touched_;  // last_use not yet persisted
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;            // slots with no owner and no reads; lowest last
  std::unordered_map<std::uint64_t, Op> ops_;  // ticket -> operation in flight
  std::vector<StoreCompletion> completions_;   // waiting for poll()
  std::vector<BlockKey> evicted_;              // waiting for take_evicted()
  StoreStats stats_;
  util::LatencyStats read_latency_, write_latency_;
  CircuitBreaker breaker_;
};

}  // namespace kvtier::tiers
