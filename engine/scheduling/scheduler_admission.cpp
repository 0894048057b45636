// Admission: taking waiting requests into the batch while they fit, with
// the prefix cache's blocks (and a swapped request's own) when it has them.
#include <algorithm>
#include <cassert>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

int Scheduler::blocks_to_admit(const Request& r) const {
  if (r.eviction().evicts() && r.swap_ && r.swap_->stashed() > 0) return r.swap_->stashed() + 1;
  return blocks_for(static_cast<long>(r.tokens_.size()));
}

void Scheduler::admit(StepOutput& out) {
  // In queue order, except that a request whose cached blocks are still
  // coming up from L2 or L3 keeps its place without holding back the ones
  // behind it (vLLM's waiting-for-KV state): a read of milliseconds must not
  // stall requests that need none. Order never changes a request's tokens.
  // Blocks that the requests passed over for their loading KV will need once
  // it has landed: a request behind them goes only if it fits beside them.
  // (Without this, two loading requests took turns: the promotions of one
  // pushed the other's landed blocks back down, round after round.)
  int landing = 0;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Request& r = *requests_.at(it->id);
    if (used_batch_slots() + batch_slots(r) > config_.max_batch_size) break;
    // Keep the pages (and copies of shared blocks) the running requests need
    // for this step's decode, so an admission never forces a preemption in
    // the same step.
    int growth = 0;
    for (const Request* a : admitted_) {
      if (a->status_ == RequestStatus::kRunning)
        growth += a->kv_.blocks_needed(*pool_, a->kv_.length() + 1);
    }
    const int tokens = static_cast<int>(r.tokens_.size());
    const int need = blocks_to_admit(r);
    if (need > max_blocks_) {
      // submit() saw to it that the request fits while its policy evicts;
      // only a re-prefill after a recompute preemption (which evicts nothing
      // before its pass ends) can need more. It never will fit: waiting at
      // the head of the queue, it would hold back every request behind it.
      const int P = config_.page_size;
      r.error_ = "preempted at " + std::to_string(tokens) +
                 " tokens, which its re-prefill would hold at once (" + std::to_string(need) +
                 " pages of " + std::to_string(P) + ") but max_kv_tokens allows " +
                 std::to_string(max_blocks_ * P) +
                 "; preemption swap (with an L2) keeps such a request";
      it = waiting_.erase(it);
      r.swap_.reset();
      r.status_ = RequestStatus::kFailed;
      RequestEvent event = event_for(r);
      event.error = r.error_;
      out.events.push_back(std::move(event));
      continue;
    }
    if (used_blocks() + growth + landing + need > max_blocks_) break;
    if (cache_) {
      const Restore restored = restore_from_cache(r, need);
      if (restored == Restore::kNoRoom) break;
      if (restored == Restore::kLoading) {
        landing += need;
        ++it;
        continue;
      }
    }
    // A swapped request whose whole KV came back decodes at once.
    const bool resumes = r.num_generated() > 0 && r.kv_.length() == tokens - 1;
    if (!resumes && !reserve(r, tokens)) {
      // Only when cached blocks could not be demoted in time (L3 writes in
      // flight): give back what the cache lent and try again next step.
      r.computed_before_ = std::max(r.computed_before_, r.kv_.length());
      r.kv_.release(*pool_);
      layer_loads_.erase(&r);
      r.split_end_ = r.split_resume_ = 0;
      break;
    }
    it = waiting_.erase(it);
    if (r.status_ == RequestStatus::kSwapped) {
      r.swap_.reset();
      ++swapped_in_;
    }
    r.status_ = resumes ? RequestStatus::kRunning : RequestStatus::kPrefilling;
    admitted_.push_back(&r);
  }
}

Scheduler::Restore Scheduler::restore_from_cache(Request& r, int budget_blocks) {
  const int tokens = static_cast<int>(r.tokens_.size());
  const int P = config_.page_size;
  // A swapped request comes back only when L1 can take all of it now: a
  // restore cut short, or a reserve that fails after it, would drop blocks
  // swap kept and recompute them. Blocks still in transit cannot make room;
  // the requests running will, so it waits for them (with none running,
  // everything but transfers is free or demotable, and it goes).
  const bool stashed = r.swap_ && r.swap_->stashed() > 0;
  const bool swapped = r.num_generated() > 0 || stashed;
  if (swapped && !admitted_.empty() && pool_->num_free() + cache_->demotable_l1() < budget_blocks)
    return Restore::kNoRoom;
  PrefixLease lease;
  if (!r.eviction().evicts()) {
    // At least the last token is always fed: its logits pick the next token.
    // A fresh request may start while the last of its prefix is still
    // landing from L3, a layer at a time, or split it (recomputing its front
    // while the rest loads); a swapped one waits for its blocks (they return
    // beside the blocks it owns).
    auto leased = cache_->acquire_prefix(r.cache_root_, r.tokens_, (tokens - 1) / P, budget_blocks,
                                         /*early=*/!swapped, prefill_shape());
    if (!leased) return Restore::kLoading;
    lease = std::move(*leased);
    if (!r.cached_counted_) {
      for (int t = 0; t < kNumTiers; ++t) r.cached_tokens_[t] = lease.served().blocks[t] * P;
      r.cached_counted_ = true;
    }
  }
  int length = static_cast<int>(lease.blocks().size()) * P;
  if (const PrefixSplit split = lease.split(); split.count > 0) {
    r.split_end_ = (split.first + split.count) * P;
    r.split_resume_ = length;
    length = split.first * P;
  }
  // A swapped request's own blocks come back when the shared part reaches
  // them: its partial block after its full ones, or (with an eviction
  // policy) its whole table, holes included. Without room for them, the
  // lease gives back what it lent.
  const bool due = stashed && (r.eviction().evicts() || length == r.swap_->length() / P * P);
  auto kv = cache_->resume(lease, due ? &*r.swap_ : nullptr, due ? r.swap_->length() : length);
  if (!kv) return Restore::kNoRoom;
  if (lease.loading()) layer_loads_[&r] = std::move(lease);
  r.kv_ = std::move(*kv);
  return Restore::kDone;
}

Scheduler::Shareable Scheduler::shareable(const Request& r) const {
  // KV computed with pages evicted is not what the full cache holds: never
  // shared.
  if (r.eviction().evicts()) return {};
  int full = r.kv_.length() / config_.page_size;
  // A prefix still landing by layer came from the cache and is there already,
  // except a block whose move failed: the cache let go of it because its
  // bytes are unknown, and taking it back from the request would serve them.
  // Only the blocks before the load are offered (a touch, for them).
  if (const auto it = layer_loads_.find(&r); it != layer_loads_.end()) {
    const auto table = r.kv_.block_ids().first(static_cast<std::size_t>(full));
    full = static_cast<int>(std::find(table.begin(), table.end(), it->second.load().first_block()) -
                            table.begin());
  }
  return {std::span(r.tokens_).first(static_cast<std::size_t>(full) * config_.page_size),
          r.kv_.block_ids().first(static_cast<std::size_t>(full))};
}

void Scheduler::insert_into_cache(const Request& r) {
  const Shareable s = shareable(r);
  cache_->insert(r.cache_root_, s.tokens, s.blocks);
}

bool Scheduler::reserve(Request& r, int n) {
  const int more = r.kv_.blocks_needed(*pool_, n);
  if (more == 0) return true;
  if (used_blocks() + more > max_blocks_) return false;
  // Cached blocks no request holds make way (demoted down the tiers).
  if (cache_) cache_->make_free_l1(more);
  return r.kv_.reserve(*pool_, n);
}

}  // namespace kvtier
