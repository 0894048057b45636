// What the scheduler reports about itself: stats and invariants.
#include <algorithm>
#include <string>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.waiting = static_cast<int>(waiting_.size());
  auto to_prefill = [](const Request* r) {
    return static_cast<long>(r->tokens().size()) - r->prefill_cursor();
  };
  for (const QueueKey& k : waiting_) s.backlog_rows += to_prefill(requests_.at(k.id).get());
  for (const Request* r : admitted_) {
    if (r->status_ == RequestStatus::kPrefilling) {
      ++s.prefilling;
      s.backlog_rows += to_prefill(r);
    }
    if (r->status_ == RequestStatus::kRunning) {
      ++s.running;
      ++s.backlog_rows;
    }
  }
  s.blocks_used = used_blocks();
  // Cached blocks no request holds give way on demand, so they count as free.
  s.blocks_free = std::min(max_blocks_ - s.blocks_used,
                           pool_->num_free() + (cache_ ? cache_->demotable_l1() : 0));
  s.steps = steps_;
  s.preemptions = preemptions_;
  s.recomputed_tokens = recomputed_tokens_;
  s.swapped_out = swapped_out_;
  s.evicted_blocks = evicted_blocks_;
  s.swapped_in = swapped_in_;
  s.discarded_passes = discarded_passes_;
  for (const auto& [id, r] : requests_) s.swapped += r->status_ == RequestStatus::kSwapped;
  return s;
}

std::expected<void, std::string> Scheduler::check_invariants() const {
  auto fail = [](const Request& r, const std::string& what) {
    return std::unexpected("request " + std::to_string(r.id_) + " (" +
                           std::string(to_string(r.status_)) + "): " + what);
  };
  // Block tables holding each block, and which request saw it last (to catch
  // a block twice in one table).
  std::vector<int> holders(static_cast<std::size_t>(pool_->num_blocks()), 0);
  std::vector<RequestId> last_holder(static_cast<std::size_t>(pool_->num_blocks()), 0);
  int waiting = 0, admitted = 0;
  for (const auto& [id, ptr] : requests_) {
    const Request& r = *ptr;
    const int length = r.kv_.length();
    const int tokens = static_cast<int>(r.tokens_.size());
    const bool in_batch = std::find(admitted_.begin(), admitted_.end(), &r) != admitted_.end();
    switch (r.status_) {
      case RequestStatus::kPrefilling:
        if (length >= tokens || r.kv_.capacity() < tokens)
          return fail(r, "KV length " + std::to_string(length) + " and capacity " +
                             std::to_string(r.kv_.capacity()) + " for " + std::to_string(tokens) +
                             " tokens to prefill");
        [[fallthrough]];
      case RequestStatus::kRunning:
        if (r.split_resume_ > 0 &&
            (r.status_ != RequestStatus::kPrefilling || length > r.split_end_ ||
             r.split_end_ >= r.split_resume_ || r.split_resume_ >= tokens))
          return fail(r, "KV length " + std::to_string(length) + " and a split to " +
                             std::to_string(r.split_end_) + " resuming at " +
                             std::to_string(r.split_resume_) + " for " + std::to_string(tokens) +
                             " tokens");
        if (r.status_ == RequestStatus::kRunning && length != tokens - 1)
          return fail(r, "KV length " + std::to_string(length) + " but " + std::to_string(tokens) +
                             " tokens (expected tokens - 1)");
        if (!in_batch) return fail(r, "admitted but not in the batch");
        ++admitted;
        break;
      case RequestStatus::kWaiting:
      case RequestStatus::kSwapped:
        if (!waiting_.contains(queue_key(r))) return fail(r, "waiting but not in the queue");
        ++waiting;
        [[fallthrough]];
      default:
        if (!r.kv_.block_ids().empty() || length != 0)
          return fail(r, "holds " + std::to_string(r.kv_.block_ids().size()) +
                             " blocks but is not admitted");
        if (in_batch) return fail(r, "in the batch but not admitted");
        break;
    }
    for (int block : r.kv_.block_ids()) {
      if (block == SequenceKv::kEvictedBlock) continue;
      if (block < 0 || block >= pool_->num_blocks())
        return fail(r, "block " + std::to_string(block) + " is outside the pool");
      if (last_holder[block] == r.id_)
        return fail(r, "block " + std::to_string(block) + " is in its table twice");
      if (!pool_->is_allocated(block))
        return fail(r, "block " + std::to_string(block) + " is in its table but free");
      last_holder[block] = r.id_;
      ++holders[block];
    }
  }
  // Every reference the pool counts is a block-table entry or the prefix
  // cache's, and the other way round; the referenced blocks and the free list
  // then partition the pool.
  const std::vector<int> cached =
      cache_ ? cache_->l1_ref_counts() : std::vector<int>(holders.size(), 0);
  int used = 0, referenced = 0;
  for (int block = 0; block < pool_->num_blocks(); ++block) {
    if (holders[block] + cached[block] != pool_->ref_count(block))
      return std::unexpected("block " + std::to_string(block) + " has " +
                             std::to_string(pool_->ref_count(block)) + " references but " +
                             std::to_string(holders[block]) + " block tables and " +
                             std::to_string(cached[block]) + " cache entries hold it");
    if (holders[block] > 0) ++used;
    if (pool_->is_allocated(block)) ++referenced;
  }
  if (waiting != static_cast<int>(waiting_.size()))
    return std::unexpected("the queue holds " + std::to_string(waiting_.size()) + " entries but " +
                           std::to_string(waiting) + " requests are waiting");
  if (admitted != static_cast<int>(admitted_.size()))
    return std::unexpected("the batch holds " + std::to_string(admitted_.size()) +
                           " requests but " + std::to_string(admitted) + " are admitted");
  if (used_batch_slots() > config_.max_batch_size)
    return std::unexpected(std::to_string(used_batch_slots()) +
                           " batch slots taken, over max_batch_size " +
                           std::to_string(config_.max_batch_size));
  if (used != used_blocks())
    return std::unexpected("the budget counts " + std::to_string(used_blocks()) +
                           " blocks but the block tables hold " + std::to_string(used));
  if (used > max_blocks_)
    return std::unexpected("the requests use " + std::to_string(used * config_.page_size) +
                           " KV tokens, over max_kv_tokens (" +
                           std::to_string(max_blocks_ * config_.page_size) + ")");
  if (pool_->num_free() + referenced != pool_->num_blocks())
    return std::unexpected(std::to_string(pool_->num_free()) + " free + " +
                           std::to_string(referenced) + " referenced blocks != pool size " +
                           std::to_string(pool_->num_blocks()));
  if (cache_) return cache_->check_invariants();
  return {};
}

}  // namespace kvtier
