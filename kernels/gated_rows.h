// Rows gathered from a table, and rows added under a sigmoid gate: the
// value embeddings and smear of the nanochat forward (notes/nanochat.md §2).
// gated_add_rows is the CPU reference of the CUDA kernel
// (cuda/gated_rows.cu); both compute each gate with gate_element
// (elementwise.h) and add in the same order.
#pragma once

#include "kernels/host_device.h"

namespace kvtier::kernels {

// For each row r < rows not skipped (skip null, or skip[r] >= 0), and each
// group g < groups:
//   gate = gate_element(gate_in + r * gate_in_stride, gate_weight + g * gate_channels,
//                       gate_channels, scale)
//   out[r * out_stride + g * width + i] += gate * src[s * src_stride + g * width + i],
//     i < width, s = src_row ? src_row[r] : r.
// Every gate of a row is computed before any of its outputs change, so
// gate_in may overlap out (smear's gate reads the row it updates). The
// arrays are in the memory of the device that runs the call.
struct GatedRows {
  float* out = nullptr;
  long out_stride = 0;
  const float* gate_in = nullptr;
  long gate_in_stride = 0;
  int gate_channels = 0;
  const float* gate_weight = nullptr;  // (groups, gate_channels)
  int groups = 0;
  int width = 0;
  const float* src = nullptr;
  long src_stride = 0;
  const int* src_row = nullptr;  // null: row r reads src row r
  const int* skip = nullptr;     // null: no row skipped
  float scale = 1.0f;
  int rows = 0;
};

// The largest `groups` the CUDA kernel takes (a gate per group in shared
// memory); a nanochat model has n_kv_head of them.
inline constexpr int kGatedRowsMaxGroups = 64;

void gated_add_rows(const GatedRows& g);

// out (rows, width) = table rows ids[r]; a row whose id is negative is zero.
void gather_rows(float* out, const float* table, const int* ids, int rows, int width);

}  // namespace kvtier::kernels
