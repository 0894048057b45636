#include "tiers/redis_node.h"

namespace kvtier::tiers {

RedisNode::RedisNode(RedisAddress address, RedisNodeOptions options)
    : address_(std::move(address)),
      options_(std::move(options)),
      breaker_(options_.backoff_initial, options_.backoff_max, options_.clock) {}

std::expected<std::vector<RedisReply>, RedisNode::RoundError> RedisNode::round(
    std::span<const RedisConnection::Command> commands, const ValueSink& sink) {
  bool probe = false;
  {
    std::lock_guard lock(mu_);
    const CircuitBreaker::Admit admit = breaker_.admit();
    if (admit == CircuitBreaker::Admit::kNo) return std::unexpected(RoundError::kRefused);
    probe = admit == CircuitBreaker::Admit::kProbe;
  }
  // The network, outside the lock: accepting() and health() never wait on
  // it.
  std::string why;
  if (!connection_ || connection_->broken()) {
    connection_.reset();
    auto made = RedisConnection::connect(address_, options_.timeout, options_.password);
    if (made)
      connection_ = std::move(*made);
    else
      why = made.error();
  }
  std::expected<std::vector<RedisReply>, std::string> replies = std::unexpected(why);
  if (connection_) replies = connection_->round(commands, options_.timeout, sink);
  std::lock_guard lock(mu_);
  if (!replies) {
    connection_.reset();
    failed_locked(probe, replies.error());
    return std::unexpected(RoundError::kFailed);
  }
  breaker_.success(probe);
  return std::move(*replies);
}

bool RedisNode::probe() {
  const RedisConnection::Command ping = {"PING"};
  auto replies = round(std::span(&ping, 1));
  if (!replies) return false;
  if ((*replies)[0].is_error()) {
    fail("PING: " + (*replies)[0].str);
    return false;
  }
  return true;
}

void RedisNode::fail(const std::string& why) {
  std::lock_guard lock(mu_);
  failed_locked(false, address_.to_string() + ": " + why);
}

void RedisNode::failed_locked(bool probe, const std::string& why) {
  breaker_.failure(probe);
  last_error_ = why;
}

bool RedisNode::accepting() const {
  std::lock_guard lock(mu_);
  return breaker_.accepting();
}

std::optional<CircuitBreaker::Clock::time_point> RedisNode::probe_due() const {
  std::lock_guard lock(mu_);
  if (!breaker_.is_open()) return std::nullopt;
  return breaker_.open_until();
}

NodeHealth RedisNode::health() const {
  std::lock_guard lock(mu_);
  NodeHealth h;
  h.address = address_.to_string();
  h.available = !breaker_.is_open();
  h.breaker_opened = breaker_.opened();
  h.last_error = last_error_;
  return h;
}

}  // namespace kvtier::tiers
