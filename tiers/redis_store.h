// The remote tier: blocks in Redis (one server, or a Redis Cluster whose
// masters each hold the keys of their hash slots), shared by every daemon
// that points at the same servers and namespace, so that a prefix computed on one machine is
// read, not recomputed, on the others.
//
// Values are content-addressed and immutable. A block lives under
//
//   kvtier:<namespace>:<format tag, 16 hex>:<block key, 32 hex>
//
// (the block key's chain already covers the model, the layout, the page
// size and the request's cache_salt; the format tag keeps exact and int8
// blocks apart) as a value of tiers/remote_value.h: header, metadata,
// payload, checksum and, with a fleet secret, an HMAC. Writes are SET NX:
// the first writer wins and nobody overwrites, so there is nothing to keep
// coherent. Nothing is deleted but values that fail their checks.
//
// Fail closed: a read is kOk only when the whole value decodes (header,
// format, length, checksum, HMAC) under the key it was read from and its
// metadata is the one expected; otherwise it is a counted
// kChecksumMismatch, and a value that is corrupt (not one of another
// version, nor one this daemon cannot authenticate: those may be a
// neighbour's good values) is deleted. A key Redis evicted (maxmemory) is a
// plain kNotFound.
//
// The index is elsewhere: what lookup() and contains() say comes from
// answers to knows(), which asks about a prefix's keys in one pipelined
// round (GETRANGE of each value's first kRemotePeekBytes: header and
// metadata, not the payload), and from this daemon's own writes and reads.
// A "present" answer holds until a read finds the key gone; an "absent" one
// for absent_ttl, after which it is asked again (another daemon may have
// written it meanwhile).
//
// Degrade, never fail: all network I/O runs on the store's I/O thread, in
// pipelined rounds (lookups first, then reads, then writes, at most
// round_bytes of values a round), each with one deadline (timeout). A
// round that fails opens its node's breaker (tiers/redis_node.h; in a
// cluster, only the keys of that node's slots are affected): the
// operations complete kIoError, later ones kUnavailable without being
// tried, lookups answer "absent", and a probe closes the breaker again by
// itself once the node answers. A full Redis (OOM under noeviction) refuses
// writes: kNoSpace.
//
// Contract otherwise as tiers/block_store.h, with these differences: erase()
// forgets a block here but leaves the value for the fleet (Redis's own
// eviction, allkeys-lru, makes room), set_protected() cannot keep Redis
// from evicting (a protected block lost there is read as a miss and
// recomputed), and capacity_blocks is 0: Redis's memory is its own.
//
// Threading: every call from the owner's thread, except lookup, contains,
// accepting and stats (any thread). One mutex guards the queue, the
// answers, the completions and the stats; the I/O thread holds it only
// between rounds, never across the network.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tiers/block_store.h"
#include "tiers/redis_address.h"
#include "tiers/redis_cluster.h"
#include "tiers/remote_secret.h"
#include "tiers/remote_value.h"
#include "util/latency_stats.h"

namespace kvtier::tiers {

struct RedisStoreOptions {
  // One server, or seed nodes of a Redis Cluster (tiers/redis_cluster.h).
  std::vector<RedisAddress> addresses;
  // Daemons share blocks only within a namespace: 1 to 64 of
  // [A-Za-z0-9_.-].
  std::string key_namespace = "default";
  std::string password;                        // AUTH; empty: none
  std::shared_ptr<const RemoteSecret> secret;  // the fleet's; null: no HMAC
  std::chrono::milliseconds timeout{250};      // to connect, and for each round
  std::size_t block_bytes = 0;                 // payload bytes of a block
  std::uint64_t format_tag = 0;                // StoreParams::format_tag
  // How long an answer "not there" is believed.
  std::chrono::milliseconds absent_ttl{1000};
  // Answers remembered at most: past it the oldest are forgotten (a present
  // one through take_evicted(), so the owner's map follows).
  std::size_t max_known = 1 << 18;
  // Bytes of values a round carries at most (one operation always goes).
  std::size_t round_bytes = 16u << 20;
  std::chrono::milliseconds backoff_initial{1000}, backoff_max{30000};
  std::function<CircuitBreaker::Clock::time_point()> clock;  // empty: steady_clock
  // Runs on the I/O thread after each round's completions are queued, with
  // no lock held: wakes a sleeping owner.
  std::function<void()> on_completion;
};

// The Redis key of a block.
std::string redis_key(const std::string& key_namespace, std::uint64_t format_tag,
                      const BlockKey& key);

class RedisStore final : public BlockStore {
 public:
  // Checks the options and that the servers answer (RedisCluster::open,
  // within the timeout); an error says which and why. Nothing is written.
  static std::expected<std::unique_ptr<RedisStore>, std::string> open(
      const RedisStoreOptions& options);
  // Completes what was started (within the rounds' deadlines) and stops the
  // I/O thread.
  ~RedisStore() override;
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  std::size_t block_bytes() const override { return options_.block_bytes; }
  std::size_t slot_bytes() const override { return options_.block_bytes; }

  std::uint64_t write(const BlockRecord& record, const std::byte* src) override;
  std::uint64_t read(const BlockKey& key, std::span<const std::byte> expected_meta, std::byte* dst,
                     int parts = 1, std::uint64_t skip = 0) override;
  bool knows(std::span<const BlockKey> keys) override;
  std::optional<BlockRecord> lookup(const BlockKey& key) const override;
  bool contains(const BlockKey& key) const override;
  void erase(const BlockKey& key) override;
  void set_protected(const BlockKey& /*key*/, bool /*is_protected*/) override {}

  void flush() override;
  std::vector<StoreCompletion> poll() override;
  void drain() override;
  std::vector<BlockKey> take_evicted() override;

  bool accepting() const override;
  StoreStats stats() const override;

 private:
  enum class OpKind { kLookup, kRead, kWrite };
  struct Op {
    OpKind kind = OpKind::kLookup;
    std::uint64_t ticket = 0;  // none for a lookup
    BlockKey key;
    std::vector<std::byte> meta;  // a write's, a read's expected
    const std::byte* src = nullptr;
    std::byte* dst = nullptr;
    std::chrono::steady_clock::time_point start;
  };
  // What a round made of an operation, applied under the lock.
  struct Outcome {
    StoreStatus status = StoreStatus::kOk;
    bool transferred = false;                          // a write that stored, a read that served
    std::optional<std::vector<std::byte>> found_meta;  // a lookup's answer: there
    bool remove = false;                               // a value to delete: corrupt
  };
  enum class KnownState { kAsking, kPresent, kAbsent };
  struct Known {
    KnownState state = KnownState::kAsking;
    std::vector<std::byte> meta;  // kPresent
    std::chrono::steady_clock::time_point at;
  };

  RedisStore(const RedisStoreOptions& options, std::unique_ptr<RedisCluster> servers);
  std::chrono::steady_clock::time_point now() const;
  RemoteValueSpec value_spec() const;
  std::string key_of(const BlockKey& key) const;

  void run();  // the I/O thread
  // Takes the next round's operations off the queue. REQUIRES mu_.
  std::vector<Op> take_round_locked();
  // The network part of a round, no lock held: an outcome per operation.
  std::vector<Outcome> do_round(const std::vector<Op>& ops, std::vector<std::string>& removals);
  // A read's value, checked and copied to op.dst (a string reply).
  Outcome read_value(const Op& op, std::span<const std::byte> value) const;
  // Any other reply's meaning.
  Outcome outcome_of(const Op& op, const RedisReply& reply) const;
  void apply_locked(const std::vector<Op>& ops, const std::vector<Outcome>& outcomes);
  void complete_locked(const Op& op, StoreStatus status);
  void remember_locked(const BlockKey& key, Known known);

  const RedisStoreOptions options_;
  const std::unique_ptr<RedisCluster> servers_;
  std::uint64_t next_ticket_ = 1;  // owner's thread only

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable wake_io_, idle_;
  std::vector<Op> queue_;
  bool flushed_ = false;   // the queue is ready to go
  bool in_round_ = false;  // the I/O thread has taken work it has not applied yet
  bool stop_ = false;
  std::vector<std::string> removals_;  // keys of corrupt values, deleted next round
  std::unordered_map<BlockKey, Known, BlockKeyHash> known_;
  std::size_t present_ = 0;  // known_ entries kPresent
  std::vector<StoreCompletion> completions_;
  std::vector<BlockKey> evicted_;
  StoreStats stats_;
  util::LatencyStats read_latency_, write_latency_;

  std::thread io_;  // last: started once everything above is
};

}  // namespace kvtier::tiers
