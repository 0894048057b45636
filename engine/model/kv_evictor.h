// The eviction an EvictionPolicy (eviction_policy.h, which says what each
// policy keeps, and when) makes of one sequence's KV: the pages it drops
// after each step, the scores H2O gathers for it, and the bound on the KV a
// request can hold that admission charges. The policy itself (parse,
// validate, to_string) needs none of this, so the front doors that check a
// request's policy link only that.
#pragma once

#include <span>
#include <vector>

#include "engine/model/eviction_policy.h"
#include "engine/model/kv_layout.h"
#include "engine/model/sequence_kv.h"
#include "kernels/attention.h"
#include "kernels/rotary.h"
#include "tiers/block_pool.h"

namespace kvtier {

// Seed 000's `_effective_kv_tokens` contract, for admission: the most KV
// positions, in whole pages (as the pool hands them out and the scheduler
// charges them), that a sequence holds at any moment — eviction done after
// each step as described above, the page of the position being written
// included — while it grows from a `prompt`-token prefill to `positions`
// positions (for a request: prompt + max_tokens - 1, capped at the context).
// The prompt's own pages bound it from below (no eviction during prefill);
// with kNone it is ceil(positions / page_size) * page_size. The eviction and
// this bound agree exactly: some moment of a long enough run holds this
// many. REQUIRES: policy.validate(page_size), 1 <= prompt <= positions.
int effective_kv_tokens(const EvictionPolicy& policy, int prompt, int positions, int page_size);

// The pages of `kv` that `policy` drops now, as increasing block-table
// indices (resident, full pages only; empty for kNone). `scores` holds the
// sequence's accumulated attention scores by position (at least kv.length()
// entries) and is read by H2O only, gathered from the queries at positions
// `scores_from` on (KvEvictor::scores_from). REQUIRES:
// policy.validate(kv.page_size()).
std::vector<int> pages_to_evict(const EvictionPolicy& policy, const SequenceKv& kv,
                                std::span<const kernels::AttentionScore> scores,
                                int scores_from = 0);

// What cache rotation (EvictionPolicy rotate) needs of the model: the table
// its keys were rotated with (Model::rotary()) and where they sit in a block
// (Model::kv_layout()).
struct KeyRotation {
  const kernels::RotaryTable* table = nullptr;
  KvLayout layout;
};

// One sequence's eviction state: its policy and, for H2O, the attention
// scores its positions have gathered. One per request (a forked sample copies
// its head's). Not thread-safe.
//
// Use, per forward pass of the sequence:
//   chunk.scores = evictor.scores();            // null unless H2O
//   model.forward(...);
//   if (kv.length() >= prompt_length) evictor.evict(kv, pool);
class KvEvictor {
 public:
  // REQUIRES: policy.validate(page size of the sequences it will see);
  // `context` is the model's block_size (positions scores are kept for),
  // `prompt` the request's prompt length (SnapKV's window ends there).
  KvEvictor(EvictionPolicy policy, int context, int prompt = 0);

  const EvictionPolicy& policy() const { return policy_; }

  // For Model::Chunk::scores: `context` entries, or null when the policy
  // reads no scores.
  kernels::AttentionScore* scores() { return scores_.empty() ? nullptr : scores_.data(); }
  // For Model::Chunk::scores_from: the first position whose query scores.
  int scores_from() const { return scores_from_; }
  std::span<const kernels::AttentionScore> score_view() const { return scores_; }

  // What the scheduler calls after each step: the block-table indices of kv
  // to evict now (see pages_to_evict()). Changes nothing.
  std::vector<int> pages_to_evict(const SequenceKv& kv) const;

  // pages_to_evict() and SequenceKv::evict_block() for each; returns how many
  // pages went back to `pool` (or lost this sequence's reference). With
  // rotation, then turns the keys of every resident page after an evicted
  // one back by the positions evicted before it (eviction_policy.h), in
  // place. REQUIRES with rotation: `rotation` has a table and kv's page
  // size, and the pages after an evicted one are this sequence's alone.
  int evict(SequenceKv& kv, tiers::BlockPool& pool, const KeyRotation* rotation = nullptr) const;

  // For Model::Chunk::rotary_offset: with rotation, the positions the
  // sequence has evicted (its evicted pages, all before its length); else 0.
  int rotary_offset(const SequenceKv& kv) const;

  // Forgets every score, as when a preempted request is recomputed from
  // scratch.
  void reset();

 private:
  // The rotation evict() makes after dropping the pages `evicted`
  // (increasing block-table indices).
  static void rotate_after(const SequenceKv& kv, tiers::BlockPool& pool,
                           std::span<const int> evicted, const KeyRotation& rotation);

  EvictionPolicy policy_;
  std::vector<kernels::AttentionScore> scores_;  // by position; empty unless H2O
  int scores_from_ = 0;
};

}  // namespace kvtier
