// The remote tier's servers, as one: a single Redis, or the masters of a
// Redis Cluster and which of them serves which hash slot
// (tiers/redis_slots.h). The store hands it a round of keyed commands; it
// sends each node its share as one pipelined round, follows MOVED (the
// slot moved for good: the map is updated and asked for again) and ASK
// (this command only, after ASKING), and answers every command with its
// reply or why it got none.
//
// A node's failure is that node's: each node keeps its own breaker
// (tiers/redis_node.h), so while one master is down the commands for its
// slots are refused at once and every other node's go through. A failed
// round also has the map asked for again (at most once per backoff_initial)
// from a node that answers, so a slot a replica took over is found there.
//
// What a server says is checked (tiers/redis_slots.h) but trusted for
// routing: a cluster node can send commands anywhere it names. Its values
// are checked by the store, never trusted.
//
// Threading: round(), probe_due_nodes() on one thread (the store's I/O
// thread); accepting(), probe_due() and health() from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tiers/block_store.h"
#include "tiers/redis_address.h"
#include "tiers/redis_node.h"
#include "tiers/redis_slots.h"

namespace kvtier::tiers {

class RedisCluster {
 public:
  // Asks the seeds in turn until one answers CLUSTER SLOTS: a cluster's
  // node gives the slot map (and its cluster must be in state ok); a server
  // with cluster support disabled is the one node, holding every key (then
  // it must be the only seed). The error says what each seed answered.
  static std::expected<std::unique_ptr<RedisCluster>, std::string> open(
      const std::vector<RedisAddress>& seeds, const RedisNodeOptions& options);

  // What a command got: its reply (error replies included, redirections
  // excepted: those were followed), or the RoundError of the node that was
  // to serve it. `node` is that node, for RedisNode::fail(); null when the
  // slot had none (its master is unknown).
  struct Answer {
    std::expected<RedisReply, RedisNode::RoundError> reply;
    RedisNode* node = nullptr;
  };
  // Every command's second argument is its key. String replies are offered
  // to `sink` (RedisConnection::round) under the command's index here.
  std::vector<Answer> round(std::span<const RedisConnection::Command> commands,
                            const ValueSink& sink = {});

  // Sends a PING to each node whose breaker is due for its probe, so that
  // it closes by itself.
  void probe_due_nodes();
  // Whether some node's breaker is open (the owner then wakes for probes).
  bool probe_due() const;
  bool accepting() const;  // some node takes rounds
  bool is_cluster() const { return cluster_; }
  std::vector<NodeHealth> health() const;

 private:
  RedisCluster(bool cluster, const RedisNodeOptions& options);
  // The node at `address`, made if it is new; null past kMaxNodes.
  RedisNode* node_at(const RedisAddress& address);
  RedisNode* node_at_locked(const RedisAddress& address);      // REQUIRES mu_
  void take_map_locked(const std::vector<SlotRange>& ranges);  // REQUIRES mu_
  // After a MOVED or a failed round: the slot map again, from the first
  // node that answers one, at most once per backoff_initial.
  void refresh_soon();

  static constexpr std::size_t kMaxNodes = 1024;  // Redis Cluster's own advice is 1000

  const bool cluster_;
  const RedisNodeOptions options_;
  std::chrono::steady_clock::time_point last_refresh_{};  // the I/O thread's

  mutable std::mutex mu_;                          // guards what follows
  std::vector<std::unique_ptr<RedisNode>> nodes_;  // only ever appended to
  std::array<RedisNode*, kRedisSlots> owner_{};    // the node serving each slot; null: none
};

}  // namespace kvtier::tiers
