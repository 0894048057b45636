// Per-request KV eviction: which whole pages of a sequence to drop as it
// grows, so that the KV it holds stays bounded (a sliding
// window as nanoGPT engines keep one, and OpenVINO GenAI's cache eviction).
//
// Policies, as EvictionPolicy::parse() reads them:
//   none                      keep everything (the default; exact).
//   window:W                  keep the last W positions (a sliding window).
//   sinks:S,window:W          also keep the first S positions for good
//                             (attention sinks, as StreamingLLM keeps them).
//   h2o:start=S,recent=R,max=M[,agg=sum|norm_sum][,snapkv=W][,kvcrush=B:ANCHOR]
//      [,rotate=on|off]
//                             OpenVINO GenAI's cache eviction: a start area
//                             (the first S positions) and a recent area (the
//                             last R) are never evicted; the pages between them
//                             are the evictable area. Whenever the sequence holds
//                             more than M positions, the evictable pages with the
//                             lowest accumulated attention scores go, until it
//                             holds M. agg: how a position's score is gathered,
//                             `sum` of the attention it received over every
//                             query, or `norm_sum` (default) that sum divided by
//                             the number of queries that could see it, so old
//                             positions are not favoured for being old.
//                             snapkv (seed 002's snapkv_window_size): the
//                             prompt's positions are scored by its last W
//                             queries only (the others add nothing), then
//                             every decode query adds as before; norm_sum
//                             divides by the queries that scored.
//                             kvcrush (seed 002's KVCrush): of the evictable
//                             pages kept, B are the most representative
//                             ones rather than the best scored (below).
//                             rotate (seed 002's apply_rotation; off by
//                             default): cache rotation, below.
//
// KVCrush, as seed 002 and OpenVINO GenAI describe it, in pages: each
// position of the evictable area gets a bit, 1 for the better-scored half
// of the area's positions (ties to the older); ANCHOR is a pattern of
// page_size bits: `zeros`, `ones`, `alternate` (0101...), `mean` (per
// offset in the page, 1 where most evictable pages have a 1) or `random`
// (seeded once: the same bits for every request and run). When pages must
// go, the area keeps its best-scored pages but B; the B are picked from
// the rest, ordered by the Hamming distance of their bits to the anchor
// (ties to the older page), at evenly spaced ranks, so the kept pages span
// the area's patterns; whatever is left goes. B must fit in the evictable
// area (max - start - recent).
//
// Pages, not positions: eviction drops whole pages (page_size positions) and
// only full ones; the page being written is never evicted. Rounding is
// outward, so a policy never drops a position it promises to keep: a window
// keeps every page that holds any of the last W positions (W = 8 at page 16
// keeps 1 or 2 pages, so the next query sees at least 8 earlier positions and
// at most 8 + 15), sinks keep every page holding any of the first S
// positions, and H2O's recent area is the pages holding any of the last R
// positions. H2O's S, R and M must be multiples of page_size (as OpenVINO
// requires of its block size) and M must leave at least one evictable page.
//
// When: never during the prompt's prefill — so whole and chunked prefill stay
// identical and the first token sees the whole prompt (OpenVINO does the
// same). After every forward pass that leaves the whole prompt in the cache
// (the one that completes the prompt, then each decode step), the owner asks
// KvEvictor::pages_to_evict() and evicts what it names
// (SequenceKv::evict_block, or KvEvictor::evict() for both). So the next
// query sees the kept pages plus its own position: a one-step lag. This
// file is the policy as a request names it; kv_evictor.h applies it to a
// sequence.
//
// Positions stay absolute: GPT-2's position embeddings are learned and
// absolute, a query keeps its position and attention skips the holes
// (kernels/attention.h). Generation still ends at the model's context.
//
// Cache rotation (rotate=on), for rotary families only (Model::rotary();
// the scheduler refuses it for GPT-2, whose positions are learned): when
// pages go, the keys of every page after them are turned back by the
// positions dropped before them (kernels::RotaryTable::shift_keys, in fp32,
// in place: a request's pages are its own, never shared), so the kept keys
// sit at contiguous rotary positions again, and each new query is rotated
// at the position after them: its block-table position less the positions
// evicted (KvEvictor::rotary_offset, from the block table alone, so a swap
// keeps it). Slots, windows and scores stay absolute; only the rotary angle
// moves. Generation still ends at the model's context (the block table
// counts absolute positions), rotated or not. A rotated page is its
// request's own: eviction already keeps such pages out of the prefix cache.
//
// Determinism: a decision depends only on the sequence's length, its block
// table and, for H2O, integer attention scores (kernels::AttentionScore), so
// a request's tokens remain deterministic and batch-invariant. They are not
// the full cache's tokens: bench/eviction_bench.cpp measures the agreement.
#pragma once

#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"

namespace kvtier {

enum class EvictionKind {
  kNone,
  kWindow,  // sinks (possibly 0) + window
  kH2o,
};

// How H2O gathers a position's score from the attention it receives.
enum class ScoreAggregation {
  kSum,      // the total over every query, layer and head
  kNormSum,  // that total divided by the number of queries that could see it
};

// KVCrush's anchor pattern (see the top).
enum class KvCrushAnchor { kRandom, kZeros, kOnes, kMean, kAlternate };

struct EvictionPolicy {
  EvictionKind kind = EvictionKind::kNone;
  // kWindow: the first `sinks` and the last `window` positions are kept.
  int sinks = 0;
  int window = 0;
  // kH2o: areas in positions (multiples of page_size) and the cap.
  int start = 0;
  int recent = 0;
  int max_size = 0;
  ScoreAggregation aggregation = ScoreAggregation::kNormSum;
  // kH2o: KVCrush's budget in pages (0: off) and anchor.
  int kvcrush_budget = 0;
  KvCrushAnchor kvcrush_anchor = KvCrushAnchor::kMean;
  // kH2o: SnapKV's window in queries (0: every query scores).
  int snapkv_window = 0;
  // kH2o: cache rotation (above).
  bool rotate = false;

  static EvictionPolicy none() { return {}; }
  static EvictionPolicy sliding_window(int window, int sinks = 0);
  static EvictionPolicy h2o(int start, int recent, int max_size,
                            ScoreAggregation aggregation = ScoreAggregation::kNormSum);
  // This H2O policy with KVCrush keeping `budget` pages.
  EvictionPolicy with_kvcrush(int budget, KvCrushAnchor anchor) const;
  // This H2O policy scoring the prompt by its last `window` queries.
  EvictionPolicy with_snapkv(int window) const;
  // This H2O policy with cache rotation on or off.
  EvictionPolicy with_rotation(bool on) const;

  // Reads the forms at the top of this file; the error names the accepted
  // forms and what was wrong. Checks what needs no page size (positive
  // numbers, known keys, no repeats); validate() does the rest.
  static std::expected<EvictionPolicy, std::string> parse(std::string_view text);
  // The form parse() reads back to this policy.
  std::string to_string() const;

  // Whether the policy can be used with pages of `page_size` positions:
  // window >= 1, sinks >= 0; H2O areas multiples of page_size, recent >= 0,
  // max_size >= start + recent + page_size, a KVCrush budget that fits in
  // the evictable area.
  std::expected<void, std::string> validate(int page_size) const;

  // Whether the policy suits the model: cache rotation needs rotary
  // positions (ModelConfig::rotary).
  std::expected<void, std::string> check_rotation(const ModelConfig& model) const;

  bool evicts() const { return kind != EvictionKind::kNone; }
  // H2O reads attention scores (Model::Chunk::scores); the others do not.
  bool needs_scores() const { return kind == EvictionKind::kH2o; }

  bool operator==(const EvictionPolicy&) const = default;
};

std::string_view to_string(ScoreAggregation aggregation);
std::string_view to_string(KvCrushAnchor anchor);

}  // namespace kvtier
