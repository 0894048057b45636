// Preemption: choosing a victim and freeing its KV by recompute or swap.
#include <algorithm>

#include "engine/scheduling/scheduler.h"

namespace kvtier {

Request* Scheduler::choose_victim() {
  // Least urgent first, then most recently arrived: the largest queue key.
  // Prefilling requests are candidates too, since they hold pages.
  auto it = std::max_element(
      admitted_.begin(), admitted_.end(),
      [this](const Request* a, const Request* b) { return queue_key(*a) < queue_key(*b); });
  return it == admitted_.end() ? nullptr : *it;
}

void Scheduler::preempt(Request& victim, StepOutput& out) {
  switch (config_.preemption) {
    case PreemptionMode::kRecompute:
      preempt_recompute(victim);
      break;
    case PreemptionMode::kSwap:
      preempt_swap(victim);
      break;
  }
  // Its blocks keep landing for the cache; a re-admission finds them there
  // (and plans its prefix afresh).
  layer_loads_.erase(&victim);
  victim.split_end_ = victim.split_resume_ = 0;
  ++victim.preemptions_;
  ++preemptions_;
  RequestEvent event = event_for(victim);
  event.preempted = true;
  out.events.push_back(std::move(event));
}

void Scheduler::preempt_recompute(Request& victim) {
  // Everything the KV held will be computed again. The generated tokens, the
  // Sampler and the StopMatcher are kept: the re-prefill covers prompt +
  // generated, and its last row's logits are those the next decode would have
  // produced, so the request continues exactly where it stopped.
  // With an eviction policy the re-prefill lets every position see the whole
  // context, which the original decode steps did not: the tokens after a
  // recompute preemption can differ from an uninterrupted run (swap keeps
  // them exact).
  victim.computed_before_ = std::max(victim.computed_before_, victim.kv_.length());
  victim.kv_.release(*pool_);
  victim.evictor_.reset();
  std::erase(admitted_, &victim);
  victim.status_ = RequestStatus::kWaiting;
  // Its original arrival puts it ahead of everything that came after it.
  waiting_.insert(queue_key(victim));
}

void Scheduler::preempt_swap(Request& victim) {
  // The full blocks join the prefix cache, held so they are dropped only as a
  // last resort; they leave L1 only when someone needs the room (they are
  // demoted like any cached block). The partial last block cannot be shared,
  // so it goes to an L2 slot of its own. Nothing is recomputed unless the
  // tiers run out of room for them.
  // A request with an eviction policy keeps its KV private: every resident
  // block goes to an L2 slot of its own, and if L2 cannot take them all it
  // is recomputed instead.
  const int length = victim.kv_.length();
  const int P = config_.page_size;
  const auto table = victim.kv_.block_ids();
  if (victim.eviction().evicts()) {
    victim.swap_ = cache_->swap_out_private(table, length);
    if (!victim.swap_) {
      preempt_recompute(victim);
      return;
    }
  } else {
    const bool partial = length % P != 0;
    const Shareable shared = shareable(victim);
    victim.swap_ = cache_->swap_out(victim.cache_root_, shared.tokens, shared.blocks,
                                    partial ? table[static_cast<std::size_t>(length / P)] : -1,
                                    length / P, length, static_cast<int>(table.size()));
  }
  victim.computed_before_ = std::max(victim.computed_before_, length);
  victim.kv_.release(*pool_);
  std::erase(admitted_, &victim);
  victim.status_ = RequestStatus::kSwapped;
  waiting_.insert(queue_key(victim));
  ++swapped_out_;
}

}  // namespace kvtier
