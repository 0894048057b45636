#include "tiers/redis_store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ranges>

namespace kvtier::tiers {

namespace {

using Clock = std::chrono::steady_clock;

bool valid_namespace(const std::string& ns) {
  if (ns.empty() || ns.size() > 64) return false;
  return std::ranges::all_of(ns, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

// A value that failed its checks for every reader: deleted. One of another
// version, or one this daemon cannot authenticate, may be a neighbour's
// good value (a fleet mid-upgrade, a daemon given the wrong secret): left.
bool corrupt_for_all(RemoteValueError error) {
  return error != RemoteValueError::kVersion && error != RemoteValueError::kUnauthenticated;
}

std::string_view as_chars(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

bool is_oom(const RedisReply& reply) { return reply.str.starts_with("OOM"); }

}  // namespace

std::string redis_key(const std::string& key_namespace, std::uint64_t format_tag,
                      const BlockKey& key) {
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(format_tag));
  return "kvtier:" + key_namespace + ":" + tag + ":" + to_hex(key);
}

// ---- opening and closing -----------------------------------------------------

RedisStore::RedisStore(const RedisStoreOptions& options, std::unique_ptr<RedisCluster> servers)
    : options_(options), servers_(std::move(servers)) {}

std::expected<std::unique_ptr<RedisStore>, std::string> RedisStore::open(
    const RedisStoreOptions& options) {
  if (!valid_namespace(options.key_namespace))
    return std::unexpected("remote_namespace '" + options.key_namespace +
                           "': 1 to 64 of the characters A-Z a-z 0-9 _ . -");
  if (options.block_bytes == 0) return std::unexpected("a block of 0 bytes");
  if (options.timeout.count() <= 0) return std::unexpected("remote_timeout must be above 0");
  RedisNodeOptions node;
  node.timeout = options.timeout;
  node.password = options.password;
  node.backoff_initial = options.backoff_initial;
  node.backoff_max = options.backoff_max;
  node.clock = options.clock;
  auto servers = RedisCluster::open(options.addresses, node);
  if (!servers) return std::unexpected(servers.error());
  std::unique_ptr<RedisStore> store(new RedisStore(options, std::move(*servers)));
  store->io_ = std::thread(&RedisStore::run, store.get());
  return store;
}

RedisStore::~RedisStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    flushed_ = true;
  }
  wake_io_.notify_all();
  if (io_.joinable()) io_.join();
}

// ---- the owner's thread ------------------------------------------------------

std::uint64_t RedisStore::write(const BlockRecord& record, const std::byte* src) {
  const std::uint64_t ticket = next_ticket_++;
  Op op;
  op.kind = OpKind::kWrite;
  op.ticket = ticket;
  op.key = record.key;
  op.meta = record.meta;
  op.src = src;
  op.start = Clock::now();
  std::lock_guard lock(mu_);
  if (auto it = known_.find(record.key);
      it != known_.end() && it->second.state == KnownState::kPresent) {
    complete_locked(op, StoreStatus::kOk);  // there already: nothing to send
    return ticket;
  }
  queue_.push_back(std::move(op));
  return ticket;
}

std::uint64_t RedisStore::read(const BlockKey& key, std::span<const std::byte> expected_meta,
                               std::byte* dst, int /*parts*/, std::uint64_t /*skip*/) {
  // A value is one GET, checked (and signed) whole: every piece is read.
  const std::uint64_t ticket = next_ticket_++;
  Op op;
  op.kind = OpKind::kRead;
  op.ticket = ticket;
  op.key = key;
  op.meta.assign(expected_meta.begin(), expected_meta.end());
  op.dst = dst;
  op.start = Clock::now();
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(op));
  return ticket;
}

bool RedisStore::knows(std::span<const BlockKey> keys) {
  // A store that would not try is asked nothing: its blocks are misses now.
  if (!accepting()) return true;
  std::lock_guard lock(mu_);
  const auto t = now();
  bool all = true, asked = false;
  for (const BlockKey& key : keys) {
    if (auto it = known_.find(key); it != known_.end()) {
      const Known& k = it->second;
      if (k.state == KnownState::kPresent) continue;
      if (k.state == KnownState::kAsking) {
        all = false;
        continue;
      }
      if (t - k.at < options_.absent_ttl) continue;
    }
    remember_locked(key, {KnownState::kAsking, {}, t});
    Op op;
    op.kind = OpKind::kLookup;
    op.key = key;
    op.start = Clock::now();
    queue_.push_back(std::move(op));
    all = false;
    asked = true;
  }
  if (asked) {
    flushed_ = true;
    wake_io_.notify_one();
  }
  return all;
}

std::optional<BlockRecord> RedisStore::lookup(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = known_.find(key);
  if (it == known_.end() || it->second.state != KnownState::kPresent) return std::nullopt;
  return BlockRecord{key, it->second.meta};
}

bool RedisStore::contains(const BlockKey& key) const {
  std::lock_guard lock(mu_);
  auto it = known_.find(key);
  return it != known_.end() && it->second.state == KnownState::kPresent;
}

void RedisStore::erase(const BlockKey& key) {
  std::lock_guard lock(mu_);
  auto it = known_.find(key);
  if (it == known_.end()) return;
  if (it->second.state == KnownState::kPresent) --present_;
  known_.erase(it);
}

void RedisStore::flush() {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return;
  flushed_ = true;
  wake_io_.notify_one();
}

std::vector<StoreCompletion> RedisStore::poll() {
  flush();
  std::lock_guard lock(mu_);
  return std::exchange(completions_, {});
}

void RedisStore::drain() {
  flush();
  std::unique_lock lock(mu_);
  // Deletions of corrupt values count as work: a drained store has sent them.
  idle_.wait(lock, [&] { return queue_.empty() && removals_.empty() && !in_round_; });
}

std::vector<BlockKey> RedisStore::take_evicted() {
  std::lock_guard lock(mu_);
  return std::exchange(evicted_, {});
}

bool RedisStore::accepting() const { return servers_->accepting(); }

StoreStats RedisStore::stats() const {
  std::lock_guard lock(mu_);
  StoreStats s = stats_;
  s.used_blocks = present_;
  s.nodes = servers_->health();
  s.available = std::ranges::any_of(s.nodes, &NodeHealth::available);
  s.set_latencies(read_latency_, write_latency_);
  return s;
}

// ---- the I/O thread ------------------------------------------------------------

void RedisStore::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    auto work = [&] { return stop_ || (flushed_ && !queue_.empty()) || !removals_.empty(); };
    if (!work()) {
      // A node whose breaker is open is probed when due, work or not, so it
      // closes by itself.
      if (servers_->probe_due()) {
        wake_io_.wait_for(lock, std::min(options_.backoff_initial, std::chrono::milliseconds(100)),
                          work);
      } else {
        wake_io_.wait(lock, work);
      }
    }
    if (stop_ && queue_.empty() && removals_.empty()) break;
    if (!work()) {
      lock.unlock();
      servers_->probe_due_nodes();
      lock.lock();
      continue;
    }
    std::vector<Op> ops = take_round_locked();
    std::vector<std::string> removals = std::exchange(removals_, {});
    in_round_ = true;
    lock.unlock();
    const std::vector<Outcome> outcomes = do_round(ops, removals);
    lock.lock();
    apply_locked(ops, outcomes);
    in_round_ = false;
    if (queue_.empty()) flushed_ = false;
    idle_.notify_all();
    if (options_.on_completion && !ops.empty()) {
      lock.unlock();
      options_.on_completion();
      lock.lock();
    }
  }
}

std::vector<RedisStore::Op> RedisStore::take_round_locked() {
  // Lookups first (a request waits on them), then reads (one waits on
  // those too), then writes.
  std::ranges::stable_sort(queue_, {}, [](const Op& op) { return static_cast<int>(op.kind); });
  std::size_t bytes = 0, n = 0;
  while (n < queue_.size()) {
    const std::size_t cost =
        queue_[n].kind == OpKind::kLookup ? kRemotePeekBytes : options_.block_bytes;
    if (n > 0 && bytes + cost > options_.round_bytes) break;
    bytes += cost;
    ++n;
  }
  std::vector<Op> ops(std::make_move_iterator(queue_.begin()),
                      std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(n)));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  return ops;
}

std::vector<RedisStore::Outcome> RedisStore::do_round(const std::vector<Op>& ops,
                                                      std::vector<std::string>& removals) {
  std::vector<Outcome> outcomes(ops.size());
  std::vector<std::string> keys(ops.size());
  std::vector<std::vector<std::byte>> values(ops.size());
  std::vector<RedisConnection::Command> commands;
  std::vector<std::size_t> op_of;  // the operation each command is for
  static const std::string peek_end = std::to_string(kRemotePeekBytes - 1);
  const RemoteValueSpec spec = value_spec();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    keys[i] = key_of(op.key);
    switch (op.kind) {
      case OpKind::kLookup:
        commands.push_back({"GETRANGE", keys[i], "0", peek_end});
        break;
      case OpKind::kRead:
        commands.push_back({"GET", keys[i]});
        break;
      case OpKind::kWrite:
        values[i] =
            encode_remote_value(op.key, spec, op.meta, std::span(op.src, options_.block_bytes));
        if (values[i].empty()) {  // the HMAC could not be made
          outcomes[i].status = StoreStatus::kIoError;
          continue;
        }
        commands.push_back({"SET", keys[i], as_chars(values[i]), "NX"});
        break;
    }
    op_of.push_back(i);
  }
  for (const std::string& key : removals) commands.push_back({"DEL", key});
  if (commands.empty()) return outcomes;
  // A read's value is checked and copied to its slot as it arrives, where
  // hiredis read it: never held whole.
  const ValueSink to_slot = [&](std::size_t c, std::span<const std::byte> value) {
    if (c >= op_of.size() || ops[op_of[c]].kind != OpKind::kRead) return false;
    outcomes[op_of[c]] = read_value(ops[op_of[c]], value);
    return true;
  };
  const std::vector<RedisCluster::Answer> answers = servers_->round(commands, to_slot);
  for (std::size_t c = 0; c < op_of.size(); ++c) {
    const std::size_t i = op_of[c];
    const RedisCluster::Answer& answer = answers[c];
    if (!answer.reply) {
      outcomes[i].status = answer.reply.error() == RedisNode::RoundError::kRefused
                               ? StoreStatus::kUnavailable
                               : StoreStatus::kIoError;
      continue;
    }
    const RedisReply& reply = *answer.reply;
    if (reply.is_error() && !(ops[i].kind == OpKind::kWrite && is_oom(reply))) {
      answer.node->fail(reply.str);
      outcomes[i].status = StoreStatus::kIoError;
      continue;
    }
    if (ops[i].kind == OpKind::kRead && reply.kind == RedisReply::Kind::kString)
      continue;  // to_slot has judged it
    outcomes[i] = outcome_of(ops[i], reply);
  }
  return outcomes;
}

RedisStore::Outcome RedisStore::read_value(const Op& op, std::span<const std::byte> bytes) const {
  Outcome out;
  const auto value = decode_remote_value(op.key, value_spec(), bytes, op.dst);
  if (!value) {
    out.status = StoreStatus::kChecksumMismatch;
    out.remove = corrupt_for_all(value.error());
    return out;
  }
  if (!std::ranges::equal(value->meta, op.meta)) {
    out.status = StoreStatus::kChecksumMismatch;  // a sound value, not the block asked for
    return out;
  }
  out.transferred = true;
  return out;
}

RedisStore::Outcome RedisStore::outcome_of(const Op& op, const RedisReply& reply) const {
  using Kind = RedisReply::Kind;
  Outcome out;
  switch (op.kind) {
    case OpKind::kLookup:
      // Not there, or not a value this store could serve: absent.
      if (reply.kind == Kind::kString) {
        if (auto meta = peek_remote_meta(value_spec(), as_bytes(reply.str)))
          out.found_meta.emplace(meta->begin(), meta->end());
      }
      return out;
    case OpKind::kRead:
      out.status = StoreStatus::kNotFound;  // evicted by Redis, or never there
      return out;
    case OpKind::kWrite:
      if (reply.is_error()) {
        out.status = StoreStatus::kNoSpace;  // OOM: Redis is full and evicts nothing
      } else {
        out.transferred = reply.kind == Kind::kStatus;  // nil: another writer was first
      }
      return out;
  }
  return out;
}

// ---- helpers ---------------------------------------------------------------------

Clock::time_point RedisStore::now() const {
  return options_.clock ? options_.clock() : Clock::now();
}

RemoteValueSpec RedisStore::value_spec() const {
  return {options_.format_tag, options_.block_bytes, options_.secret.get()};
}

std::string RedisStore::key_of(const BlockKey& key) const {
  return redis_key(options_.key_namespace, options_.format_tag, key);
}

void RedisStore::apply_locked(const std::vector<Op>& ops, const std::vector<Outcome>& outcomes) {
  const auto t = now();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const Outcome& out = outcomes[i];
    if (out.remove) removals_.push_back(key_of(op.key));
    if (out.status == StoreStatus::kIoError) ++stats_.io_errors;
    switch (op.kind) {
      case OpKind::kLookup: {
        // A write or read that completed meanwhile knows better.
        auto it = known_.find(op.key);
        if (it != known_.end() && it->second.state == KnownState::kPresent) break;
        if (out.found_meta)
          remember_locked(op.key, {KnownState::kPresent, *out.found_meta, t});
        else
          remember_locked(op.key, {KnownState::kAbsent, {}, t});
        break;
      }
      case OpKind::kRead:
        if (out.status == StoreStatus::kOk) {
          ++stats_.reads;
          stats_.read_bytes += static_cast<long>(options_.block_bytes);
        } else if (out.status == StoreStatus::kNotFound ||
                   out.status == StoreStatus::kChecksumMismatch) {
          if (out.status == StoreStatus::kNotFound) ++stats_.evictions;
          if (out.status == StoreStatus::kChecksumMismatch) ++stats_.checksum_failures;
          remember_locked(op.key, {KnownState::kAbsent, {}, t});
        }
        complete_locked(op, out.status);
        break;
      case OpKind::kWrite:
        if (out.status == StoreStatus::kOk) {
          if (out.transferred) {
            ++stats_.writes;
            stats_.write_bytes += static_cast<long>(options_.block_bytes);
          }
          remember_locked(op.key, {KnownState::kPresent, op.meta, t});
        } else if (out.status == StoreStatus::kNoSpace || out.status == StoreStatus::kUnavailable) {
          ++stats_.dropped_writes;
        }
        complete_locked(op, out.status);
        break;
    }
  }
}

void RedisStore::complete_locked(const Op& op, StoreStatus status) {
  const auto latency = Clock::now() - op.start;
  const bool is_write = op.kind == OpKind::kWrite;
  if (status == StoreStatus::kOk) (is_write ? write_latency_ : read_latency_).record(latency);
  completions_.push_back({op.ticket, op.key, is_write, status, latency});
}

void RedisStore::remember_locked(const BlockKey& key, Known known) {
  auto [it, inserted] = known_.try_emplace(key);
  if (!inserted && it->second.state == KnownState::kPresent) --present_;
  if (known.state == KnownState::kPresent) ++present_;
  it->second = std::move(known);
  if (known_.size() <= options_.max_known) return;
  // Over the bound: forget every "absent", then "present" ones (the owner
  // hears of those) down to three quarters, so this runs once per many
  // answers. Questions still out stay.
  const std::size_t target = options_.max_known / 4 * 3;
  for (auto k = known_.begin(); k != known_.end();)
    k = k->second.state == KnownState::kAbsent ? known_.erase(k) : std::next(k);
  for (auto k = known_.begin(); k != known_.end() && known_.size() > target;) {
    if (k->second.state != KnownState::kPresent || k->first == key) {
      ++k;
      continue;
    }
    evicted_.push_back(k->first);
    --present_;
    k = known_.erase(k);
  }
}

}  // namespace kvtier::tiers
