// Where a model's keys and values sit inside one KV block.
//
// A block holds page_size consecutive positions for every layer and KV head
// in one contiguous range (so moving it between tiers is one copy). Inside,
// layers follow each other; each layer is K then V in the page layout that
// kernels/attention.h describes: K (Hkv, D, P), V (Hkv, P, D).
#pragma once

#include <cstddef>

#include "engine/model/model_config.h"
#include "kernels/attention.h"
#include "kernels/kv_shape.h"

namespace kvtier {

struct KvLayout {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int page_size = 0;

  static KvLayout of(const ModelConfig& config, int page_size) {
    return {config.n_layer, config.n_kv_head, config.head_dim(), page_size};
  }

  long floats_per_half() const { return static_cast<long>(n_kv_head) * head_dim * page_size; }
  long floats_per_layer() const { return 2 * floats_per_half(); }
  std::size_t layer_bytes() const {
    return sizeof(float) * static_cast<std::size_t>(floats_per_layer());
  }
  // Bytes per block, rounded up to a cache line.
  std::size_t block_bytes() const {
    const std::size_t raw = sizeof(float) * static_cast<std::size_t>(n_layer) * floats_per_layer();
    return (raw + 63) / 64 * 64;
  }
  // Bytes of K and V one position takes across all layers.
  std::size_t bytes_per_token() const {
    return sizeof(float) * 2 * static_cast<std::size_t>(n_layer) * n_kv_head * head_dim;
  }

  // The same numbers as the int8 codec's (kernels/kv_quant.h) block shape.
  kernels::KvShape shape() const { return {n_layer, n_kv_head, head_dim, page_size}; }

  // Layer `layer` of a sequence whose block bases are `blocks`.
  kernels::PagedKv layer_view(float* const* blocks, int layer) const {
    kernels::PagedKv v;
    v.blocks = blocks;
    v.k_offset = layer * floats_per_layer();
    v.v_offset = v.k_offset + floats_per_half();
    v.page_size = page_size;
    v.n_kv_head = n_kv_head;
    v.head_dim = head_dim;
    return v;
  }
};

}  // namespace kvtier
