// A store of fixed-size blocks under their keys: what L3 and the remote
// tier are to the cache (the shape of LevelDB's Cache, LMCache's storage
// backends and vLLM's offloading managers, in our words). L2 is not one: it
// is addressed by slot, its owner choosing what stays (l2_store.h). The cache keeps its own map
// of which block is where; a store keeps bytes, the owner's metadata, and
// its own room.
//
// Contract, for every store:
//  * Blocks are immutable and content-addressed: a key names the bytes and
//    the metadata written under it for good. A write of a key already
//    stored (or being written) completes kOk without writing and counts as a
//    use.
//  * Metadata is opaque: the owner encodes it (engine/cache/block_meta.h: what
//    model, which tokens) and checks it; a store only keeps it beside the
//    bytes, returns it from lookup(), and refuses a read whose stored
//    metadata is not the expected one, as it refuses bytes whose checksum
//    does not match: kChecksumMismatch, the entry removed. Wrong bytes are a
//    miss, never a result.
//  * write() and read() start an operation and return its ticket at once;
//    its completion comes back once from poll(). The caller keeps its buffer
//    (slot_bytes() long, as the store's alignment requires) alive and
//    unchanged until then. A read's bytes are unspecified unless kOk.
//  * A store may drop blocks on its own to make room (never a protected
//    one, nor one being read); take_evicted() says which, so the owner's
//    map follows.
//  * A failing store opens its breaker: accepting() is false, operations
//    complete kUnavailable without being tried, and it closes again by
//    itself once a probe succeeds. Nothing throws or aborts on I/O failure.
//
// Threading: every call is for one thread (the owner's) unless a store says
// otherwise; completions may be made on the store's threads, and the
// on_completion callback its options take lets a sleeping owner wake.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tiers/block_key.h"
#include "util/latency_stats.h"

namespace kvtier::tiers {

// What stats show of one server of a store made of several (the remote
// tier's Redis nodes): each has its own breaker.
struct NodeHealth {
  std::string address;
  bool available = true;  // its breaker is closed
  long breaker_opened = 0;
  std::string last_error;  // why it last failed; empty if it never did

  bool operator==(const NodeHealth&) const = default;
};

// A block's key and its owner's metadata, opaque to the store.
struct BlockRecord {
  BlockKey key;
  std::vector<std::byte> meta;

  bool operator==(const BlockRecord&) const = default;
};

enum class StoreStatus {
  kOk,
  kNotFound,          // no stored entry (or only one still being written)
  kChecksumMismatch,  // the bytes or the metadata did not match: entry removed
  kIoError,           // the medium failed this operation: breaker opened
  kNoSpace,           // every slot is protected, being read or being written
  kUnavailable,       // the breaker is open: nothing was tried
};
const char* to_string(StoreStatus status);

struct StoreCompletion {
  std::uint64_t ticket = 0;  // what write()/read() returned
  BlockKey key;
  bool is_write = false;
  StoreStatus status = StoreStatus::kOk;
  std::chrono::nanoseconds latency{0};  // from write()/read() to the end of the completion
  std::size_t skipped_bytes = 0;        // a read's payload bytes left unread (its skip)
};

struct StoreStats {
  std::size_t capacity_blocks = 0, used_blocks = 0;  // used: stored or being written
  long reads = 0, writes = 0;                        // completed kOk with a transfer
  long read_bytes = 0, write_bytes = 0;              // payload bytes of those
  long skipped_bytes = 0;  // payload bytes reads left unread (read()'s skip)
  long checksum_failures = 0, io_errors = 0, evictions = 0;
  long dropped_writes = 0;  // writes refused: kUnavailable, kNoSpace
  bool available = true;    // the breaker is closed
  // Over the transfers above: the mean of all, the 99th percentile of the
  // most recent (util::LatencyStats::kWindow).
  double mean_read_us = 0, p99_read_us = 0, mean_write_us = 0, p99_write_us = 0;
  // A store on several servers (the remote tier's Redis nodes): each one's
  // breaker.
  std::vector<NodeHealth> nodes;

  // The four latency figures, from a store's recorders.
  void set_latencies(const util::LatencyStats& reads, const util::LatencyStats& writes);
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // Payload bytes of a block, and the bytes (and so the alignment) a
  // caller's buffer for one must have.
  virtual std::size_t block_bytes() const = 0;
  virtual std::size_t slot_bytes() const = 0;

  // Starts writing `src` (block_bytes valid bytes) under record.key.
  virtual std::uint64_t write(const BlockRecord& record, const std::byte* src) = 0;
  // Starts reading the block under `key` into dst, kOk only when its bytes
  // and its metadata (equal to expected_meta) check. parts > 1 reads it in
  // that many equal pieces where the store can (max_parts()), landing in
  // order, so an owner can start on the first while the rest are on their
  // way (landed()). `skip` (bit i: piece i) names pieces the owner will not
  // look at, which a store that checks pieces apart leaves unread (L3);
  // another reads them all. Either way the read is kOk only when what was
  // read checks.
  virtual std::uint64_t read(const BlockKey& key, std::span<const std::byte> expected_meta,
                             std::byte* dst, int parts = 1, std::uint64_t skip = 0) = 0;
  virtual int max_parts() const { return 1; }
  // How many leading pieces of read `ticket` are in its buffer, unverified;
  // nullopt once the last has landed or for a ticket not in flight.
  virtual std::optional<int> landed(std::uint64_t /*ticket*/) const { return std::nullopt; }

  // Whether lookup() and contains() can answer for every key in `keys` (a
  // prefix's blocks, in order). A store whose index is elsewhere (the remote
  // tier) asks about the keys it has no answer for, all in one round, and
  // says false until the answers are in: the owner asks again later, as it
  // waits for a read. A store that knows its own contents says true.
  virtual bool knows(std::span<const BlockKey> /*keys*/) { return true; }
  // The record of a stored block (not of one still being written).
  virtual std::optional<BlockRecord> lookup(const BlockKey& key) const = 0;
  virtual bool contains(const BlockKey& key) const = 0;
  // Drops the block (once no read is in flight on it); unknown keys are
  // ignored.
  virtual void erase(const BlockKey& key) = 0;
  // A protected block is never dropped to make room.
  virtual void set_protected(const BlockKey& key, bool is_protected) = 0;

  // Starts whatever write()/read() queued (they may batch).
  virtual void flush() {}
  // Completions since the last call; never blocks.
  virtual std::vector<StoreCompletion> poll() = 0;
  // Blocks until every operation started has completed (its completion then
  // waits for poll()).
  virtual void drain() = 0;
  // drain(), then makes what is stored durable as far as the store can.
  virtual std::expected<void, std::string> sync() { return {}; }
  // The keys the store dropped on its own since the last call, oldest first.
  virtual std::vector<BlockKey> take_evicted() = 0;

  // Whether an operation started now would be tried (the breaker is closed,
  // or due for its probe). Cheap.
  virtual bool accepting() const = 0;
  virtual StoreStats stats() const = 0;
  // What opening the store recovered, discarded or fell back on, a line each.
  virtual std::vector<std::string> warnings() const { return {}; }
};

}  // namespace kvtier::tiers
