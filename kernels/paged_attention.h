// Attention over paged KV for a batch of query rows: the reference for the
// CUDA kernel (cuda/paged_attention.cu), sharing its element functions.
//
// Letters and page layout as in kernels/attention.h: H query heads, Hkv KV
// heads (query head h reads KV head h / (H / Hkv)), D = head_dim, P =
// page_size; per layer in a block, K (Hkv, D, P) and V (Hkv, P, D). R = rows.
//
// A row is one query position of one sequence and sees that sequence's keys
// 0 .. row_pos (the causal mask). A decode batch is one row per sequence; a
// prefill chunk is consecutive rows of one sequence, whose own K/V are
// already written (kv_write) — its mask covers the cached prefix and the
// chunk. Both can be mixed in one call. Absent pages (null block pointers)
// are skipped, as in attention_rows().
//
// Arithmetic, per (row, head), in tiles of kAttentionTile keys from the first
// key the row sees (0, or its window's first; a streaming "online" softmax,
// so no scratch grows with the context):
//   s_t = attention_key_dot(q, K, t) * attention_scale(D)   (fma chain in increasing d)
//   per tile: the running max is raised to the tile's max (softmax_run_rescale,
//   which rescales the running sum and output), w_t = softmax_weight(s_t),
//   sum += sum of the tile's w_t, out[d] = fma(w_t, V[t][d], out[d]) in increasing t;
//   finally out /= sum.
// A row's result depends only on its q, its pages and its position: not on
// the batch, the chunking or the launch (the CUDA kernel reduces each tile in
// a fixed order too). The CPU reference sums a tile in increasing t and uses
// libm's expf; the kernel reduces in a tree and uses CUDA's expf, so the two
// agree within tolerance, not bits. Versus attention_row_reference (double
// accumulation): within ~1e-5 relative.
#pragma once

#include <cmath>

#include "kernels/host_device.h"
#include "kernels/kv_shape.h"

namespace kvtier::kernels {

// Keys per step of the online softmax; the CUDA kernel's block size.
inline constexpr int kAttentionTile = 128;
// The largest head_dim the CUDA kernel takes (each thread owns D / 128 dims).
inline constexpr int kAttentionMaxHeadDim = 256;

// R query rows over one layer of paged KV. The arrays are in the memory of
// the device that runs the call (host for the reference, GPU for the kernel).
struct PagedAttentionRows {
  const float* const* blocks = nullptr;  // the rows' block tables, concatenated; null = absent page
  const int* row_table = nullptr;        // (R) index in `blocks` of row r's block 0
  const int* row_pos = nullptr;          // (R) row r's position; it sees keys 0 .. row_pos[r]
  // A sliding window: row r sees keys row_pos[r] - window .. row_pos[r]
  // only (attention_first_key); -1, every key from 0. Keys before the
  // window are never read: their pages may be absent.
  int window = -1;
  int n_rows = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int page_size = 0;
  long k_offset = 0;  // floats from a block's base to this layer's K (KvShape::k_offset)
  long v_offset = 0;  // floats from a block's base to this layer's V
};

// The rows of layer `layer` of blocks laid out as `shape` says, with n_head
// query heads (a multiple of shape.n_kv_head).
inline PagedAttentionRows paged_attention_rows(const KvShape& shape, int layer, int n_head,
                                               const float* const* blocks, const int* row_table,
                                               const int* row_pos, int n_rows) {
  PagedAttentionRows r;
  r.blocks = blocks;
  r.row_table = row_table;
  r.row_pos = row_pos;
  r.n_rows = n_rows;
  r.n_head = n_head;
  r.n_kv_head = shape.n_kv_head;
  r.head_dim = shape.head_dim;
  r.page_size = shape.page_size;
  r.k_offset = shape.k_offset(layer);
  r.v_offset = shape.v_offset(layer);
  return r;
}

// The first key a row at position `pos` sees under `window` (-1: none).
KVTIER_HD inline int attention_first_key(int pos, int window) {
  return window < 0 || pos < window ? 0 : pos - window;
}

// 1 / sqrt(D), the score scale (IEEE sqrt and division: same bits everywhere).
KVTIER_HD inline float attention_scale(int head_dim) {
  return 1.0f / sqrtf(static_cast<float>(head_dim));
}

// q . K[slot] over d = 0 .. D-1, as a chain of fmas in increasing d (the
// order attention_rows() uses). k_page is one head's (D, P) key page.
KVTIER_HD inline float attention_key_dot(const float* q, const float* k_page, int page_size,
                                         int slot, int head_dim) {
  float s = 0.0f;
  for (int d = 0; d < head_dim; ++d) s = fmaf(q[d], k_page[d * page_size + slot], s);
  return s;
}

// The running max and sum of a streaming softmax. A masked or absent key has
// score -INFINITY and weight 0.
struct SoftmaxRun {
  float max = -INFINITY;
  float sum = 0.0f;
};

// Raises run.max to tile_max if larger and returns the factor by which
// everything accumulated so far (run.sum, done here; the output, by the
// caller) must be multiplied: exp(old max - new max), 0 when nothing was
// accumulated, 1 when the max did not change.
KVTIER_HD inline float softmax_run_rescale(SoftmaxRun& run, float tile_max) {
  if (!(tile_max > run.max)) return 1.0f;
  const float c = run.max == -INFINITY ? 0.0f : expf(run.max - tile_max);
  run.max = tile_max;
  run.sum *= c;
  return c;
}

// The unnormalised weight of a key with score s under the run's max.
KVTIER_HD inline float softmax_weight(float s, const SoftmaxRun& run) {
  return s == -INFINITY ? 0.0f : expf(s - run.max);
}

// Where element i = h * D + d of a position's key and of its value sit in
// a block (floats from its base), for the position's slot in its page: the
// page layout above. Shared by kv_write_rows_reference and the CUDA kernel.
KVTIER_HD inline long kv_key_index(const KvShape& shape, int layer, int i, int slot) {
  const int D = shape.head_dim, h = i / D, d = i % D;
  return shape.k_offset(layer) + (static_cast<long>(h) * D + d) * shape.page_size + slot;
}
KVTIER_HD inline long kv_value_index(const KvShape& shape, int layer, int i, int slot) {
  const int D = shape.head_dim, h = i / D, d = i % D;
  return shape.v_offset(layer) + (static_cast<long>(h) * shape.page_size + slot) * D + d;
}

// Writes row r's key k + r * stride and value v + r * stride (Hkv * D floats
// each) into layer `layer` at position row_pos[r], in the block of that
// position in the row's table (blocks + row_table[r], as in
// PagedAttentionRows). CPU reference of kv_write_rows_cuda; the same as
// kv_write() (kernels/attention.h) row by row.
// REQUIRES: each row's block is present.
void kv_write_rows_reference(float* const* blocks, const int* row_table, const int* row_pos,
                             int n_rows, const KvShape& shape, int layer, const float* k,
                             const float* v, long stride);

// out (R, H, D) = attention of the rows' queries q (R, H, D). CPU reference.
// REQUIRES: the page of each row's own position is present.
void paged_attention_reference(float* out, const float* q, const PagedAttentionRows& rows);

}  // namespace kvtier::kernels
