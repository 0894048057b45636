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
#pragma once

namespace kvtier::kernels {

// One layer of one sequence's KV, seen through its block table.
struct PagedKv {
  float* const* blocks = nullptr;  // block base pointers, in position order
  long k_offset = 0;               // floats from a block's base to this layer's K
  long v_offset = 0;               // floats from a block's base to this layer's V
  int page_size = 0;
  int n_kv_head = 0;
  int head_dim = 0;
};

// Writes the key and value of position `pos` (each (Hkv * D)) into its page.
// REQUIRES: the block for pos is in the table.
void kv_write(const PagedKv& kv, int pos, const float* k, const float* v);

// out (D) = softmax(q . K[0..pos] / sqrt(D)) . V[0..pos] for one query head.
// q is that head's (D) query, kv_head the head it reads. `scores` is scratch
// of at least pos + 1 floats.
void attention_row(float* out, const float* q, int pos, const PagedKv& kv, int kv_head,
                   float* scores);

// Plain reference of attention_row with libm and double accumulation, for
// tests of the fast path (agreement within tolerance, not bits).
void attention_row_reference(float* out, const float* q, int pos, const PagedKv& kv, int kv_head);

}  // namespace kvtier::kernels
