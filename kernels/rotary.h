// Rotary position embeddings as nanochat applies them (notes/nanochat.md §2):
// a head's D dimensions pair as (j, j + D/2) for j < D/2 (split halves, not
// interleaved), and with x1 = x[:D/2], x2 = x[D/2:]
//   y1 =  x1 cos + x2 sin
//   y2 = -x1 sin + x2 cos
// a rotation by -theta (the transpose of the usual convention; a trained
// checkpoint needs exactly this sign), theta = pos * inv_freq_j,
// inv_freq_j = base^(-2j/D).
//
// The table: inv_freq_j and pos * inv_freq_j are rounded to float (as
// PyTorch computes them in fp32), cos and sin of that float angle are
// rounded to float, and, for checkpoints trained with a bf16 table (every
// GPU-trained one, and every CPU one before nanochat's 2026-03-04), then to
// bfloat16 (round to nearest even). The element arithmetic is plain float
// multiplies and adds, no fused operation.
#pragma once

#include <vector>

#include "kernels/host_device.h"

namespace kvtier::kernels {

class RotaryTable {
 public:
  // cos and sin for positions [0, positions) of a head of `head_dim` (even).
  RotaryTable(int head_dim, float base, int positions, bool bf16);

  int positions() const { return positions_; }
  const float* cos(int pos) const { return cos_.data() + static_cast<long>(pos) * half_; }
  const float* sin(int pos) const { return sin_.data() + static_cast<long>(pos) * half_; }

  // Rotates `heads` heads of D floats, `x` in place, for position pos.
  // REQUIRES: 0 <= pos < positions().
  void apply(float* x, int heads, int pos) const;

  // Moves keys rotated at position p to position p + delta, in place: seed
  // 002's cache rotation, after an eviction has left a hole before them.
  // `k` is one page of one layer's keys in the page layout of attention.h,
  // (heads, D, page_size); its positions [0, count) move. Rotations
  // compose, and commute with what nanochat does to a key after its
  // rotation (an RMS norm over the head, a scale), so the cached key is
  // turned by delta's angle alone: cos and sin of delta * inv_freq_j, in
  // double, rounded to float (never to bf16: a bf16 table's rounding does
  // not compose). So a moved key equals one rotated at p + delta to within
  // float rounding, and shifting back by -delta undoes a shift to within
  // 1e-6 of the key's size.
  void shift_keys(float* k, int heads, int page_size, int count, int delta) const;

 private:
  int half_;
  int positions_;
  std::vector<float> inv_freq_;
  std::vector<float> cos_, sin_;
};

// One pair (x1, x2) of a head rotated as above, by the angle whose cos and
// sin are c and s: the element function of RotaryTable::apply and of the
// CUDA kernel (cuda/rotary.cu), the same bits on both.
KVTIER_HD inline void rotary_element(float& x1, float& x2, float c, float s) {
  const float a = x1, b = x2;
  x1 = a * c + b * s;
  x2 = b * c - a * s;
}

// fp32 -> bf16 -> fp32, round to nearest even (NaN kept a NaN).
float round_to_bf16(float x);

}  // namespace kvtier::kernels
