// Causal self-attention over a paged KV cache.
//
// Letters: P = page_size (tokens per block), H = query heads, Hkv = key/value
// heads (H is a multiple of Hkv: query head h reads kv head h / (H / Hkv)),
// D = head_dim.
//
// Page layout of one layer inside a block (the engine places layers one
// after another; the offsets below are per layer):
//   K: (Hkv, D, P)  transposed, so the keys of one head at one dimension are
//                   contiguous and a page of scores is a vector FMA chain over D
//   V: (Hkv, P, D)  so the weighted sum is a vector FMA chain over positions
//
// Determinism: a query's output depends only on its own vector and the K/V
// bytes of positions 0..pos, combined in a fixed order (scores in increasing
// d, softmax and the weighted sum in increasing position). It does not depend
// on how the sequence was chunked, what else is batched with it, or which
// thread runs it — the property every "restored equals recomputed" check
// rests on.
//
// Absent pages: an eviction policy (engine/model/eviction_policy.h) may drop whole
// pages of a sequence; their entry in PagedKv::blocks is null. Keys and
// values keep the absolute positions they were computed at, so a query
// simply skips those positions: the softmax and the weighted sum run over
// the present positions only, in the same increasing order, exactly as if
// the absent ones were masked out. With every page present the arithmetic
// is the same as before absent pages existed, bit for bit.
#pragma once

#include <cstdint>

namespace kvtier::kernels {

// Attention probabilities summed per key position, in fixed point: one
// query's whole softmax (which sums to 1) adds about kScoreOne. Integers
// because their sum is the same in any order, so a sequence's scores do not
// depend on how its prompt was chunked or tiled, the batch, or the threads
// (float sums would, in their last bits). A probability p adds
// floor(p * kScoreOne); 2^32 keeps every probability above 2.3e-10 and
// leaves room for 2^31 whole queries (layers x heads x rows) before overflow.
using AttentionScore = std::int64_t;
inline constexpr AttentionScore kScoreOne = AttentionScore{1} << 32;

// One layer of one sequence's KV, seen through its block table.
struct PagedKv {
  float* const* blocks = nullptr;  // block base pointers, in position order; null = page absent
  long k_offset = 0;               // floats from a block's base to this layer's K
  long v_offset = 0;               // floats from a block's base to this layer's V
  int page_size = 0;
  int n_kv_head = 0;
  int head_dim = 0;
};

// Writes the key and value of position `pos` (each (Hkv * D)) into its page.
// REQUIRES: the block for pos is in the table and present.
void kv_write(const PagedKv& kv, int pos, const float* k, const float* v);

// One query of attention_queries(): its vector and output (D floats each),
// its position (it sees keys first .. pos) and its sequence's KV.
struct AttentionQuery {
  const float* q = nullptr;
  float* out = nullptr;
  int pos = 0;
  PagedKv kv;
  // When not null: the query's softmax probabilities are added into it,
  // key_scores[t] += floor(p_t * kScoreOne) for every present t it sees
  // (absent ones untouched); at least pos + 1 entries, and no other thread
  // writes it during the call. Without it no score work is done at all.
  AttentionScore* key_scores = nullptr;
  // The oldest key the query sees: 0, or pos - window for a layer that
  // attends over a sliding window (nanochat's short layers). The output's
  // bits are those of attention over [first, pos] alone; keys before the
  // oldest `first` of the call's queries are never read (their pages may
  // be absent), and a windowed layer's work is its window's.
  // REQUIRES: 0 <= first <= pos.
  int first = 0;
};

// Attention of queries of one head (kv_head) over one layer, from one
// sequence or several: out = softmax(q . K[0..pos] / sqrt(D)) . V[0..pos].
//
// Keys [0, shared_keys) are shared: every query's table holds the same
// pages for them (the radix cache shares a common prefix's pages between
// sequences; a prefill tile's rows share their whole sequence). Each shared
// page is loaded once for all the queries, and every query's arithmetic is
// exactly what it would be alone: the call gives each query the bits of
// attention_rows() for that query by itself, whatever the grouping. Keys a
// query sees past shared_keys are read through its own table.
//
// Positions on absent pages are skipped (see the top of this file); the
// shared pages are absent for all queries or for none.
// REQUIRES: the queries have the same layer shape (offsets, P, Hkv, D); the
// pages of their own positions are present; `scratch` holds
// n * (max(shared_keys, max pos + 1) + 1) floats.
void attention_queries(const AttentionQuery* queries, int n, int shared_keys, int kv_head,
                       float* scratch);

// The queries of n_rows consecutive positions of one sequence, first_pos ..
// first_pos + n_rows - 1 (a tile of a prefill chunk, or one decode row), as
// attention_queries() with every key shared: q rows and out rows are D
// floats, q_stride / out_stride apart; `key_scores`, when not null, is the
// sequence's (every row adds into it). `scratch` holds at least n_rows *
// (first_pos + n_rows + 1) floats.
void attention_rows(float* out, long out_stride, const float* q, long q_stride, int n_rows,
                    int first_pos, const PagedKv& kv, int kv_head, float* scratch,
                    AttentionScore* key_scores = nullptr);

// Plain reference for one query at `pos`, with libm and double accumulation, for
// tests of the fast path (agreement within tolerance, not bits). Skips absent
// pages as attention_rows() does, and keys before `first`. `probs`, when not
// null, receives the softmax probability of every position 0..pos (0 for
// absent ones and those before `first`).
void attention_row_reference(float* out, const float* q, int pos, const PagedKv& kv, int kv_head,
                             double* probs = nullptr, int first = 0);

}  // namespace kvtier::kernels
