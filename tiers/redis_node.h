// One Redis server of the remote tier, as the tier's I/O thread uses it:
// its address, a connection made when one is needed, and its own circuit
// breaker (tiers/circuit_breaker.h), so that a failing node costs the keys
// it holds and no others.
//
// A round that cannot be made (no connection within the timeout, a broken
// or late reply) opens the breaker and drops the connection; while the
// breaker is open rounds are refused without touching the network, and once
// its backoff has passed the next round (or probe(), which the I/O thread
// calls when the node is due and idle) goes through as the probe: its
// success closes the breaker by itself. Error replies are replies: the
// caller decides what they mean for the node (fail()).
//
// Threading: round(), probe() and fail() on the I/O thread only; accepting()
// and health() from any thread.
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tiers/block_store.h"
#include "tiers/circuit_breaker.h"
#include "tiers/redis_address.h"
#include "tiers/redis_connection.h"

namespace kvtier::tiers {

struct RedisNodeOptions {
  std::chrono::milliseconds timeout{250};  // to connect, and for a whole round
  std::string password;                    // AUTH after connecting; empty: none
  std::chrono::milliseconds backoff_initial{1000}, backoff_max{30000};
  std::function<CircuitBreaker::Clock::time_point()> clock;  // empty: steady_clock
};

class RedisNode {
 public:
  RedisNode(RedisAddress address, RedisNodeOptions options);

  enum class RoundError { kRefused, kFailed };  // not tried (breaker open); tried and failed
  // The replies to `commands`, sent in one pipelined round; string replies
  // offered to `sink` first (RedisConnection::round).
  std::expected<std::vector<RedisReply>, RoundError> round(
      std::span<const RedisConnection::Command> commands, const ValueSink& sink = {});
  // A PING, as a round (refused while the breaker is open and not due):
  // true if the node answered it, which closes a breaker due for its probe.
  // Otherwise health().last_error says why.
  bool probe();
  // The node answered, but not as a healthy node does (an error reply that
  // is not about the key): counted like a failed round.
  void fail(const std::string& why);

  bool accepting() const;
  // When an open breaker's probe is due, or nullopt while it is closed.
  std::optional<CircuitBreaker::Clock::time_point> probe_due() const;
  NodeHealth health() const;
  const RedisAddress& address() const { return address_; }

 private:
  void failed_locked(bool probe, const std::string& why);

  const RedisAddress address_;
  const RedisNodeOptions options_;
  std::unique_ptr<RedisConnection> connection_;  // I/O thread only

  mutable std::mutex mu_;  // guards the breaker and the error
  CircuitBreaker breaker_;
  std::string last_error_;
};

}  // namespace kvtier::tiers
