// Where a model's keys and values sit inside one KV block.
//
// A block holds page_size consecutive positions for every layer and KV head
// in one contiguous range (so moving it between tiers is one copy). Inside,
// layers follow each other; each layer is K then V in the page layout that
// kernels/attention.h describes: K (Hkv, D, P), V (Hkv, P, D).
//
// Which layers read a block: every layer, except where the model has sliding
// windows (ModelConfig::windows): a layer with window w never reads a key
// more than w positions behind its query, so once a sequence's queries are
// all far enough past a block, that layer has no use for the block's bytes
// (layers_reading), and a tier need not bring them up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model/model_config.h"
#include "kernels/attention.h"
#include "kernels/kv_shape.h"

namespace kvtier {

struct KvLayout {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int page_size = 0;
  std::vector<int> windows;  // per layer, as ModelConfig::windows; empty: none

  static KvLayout of(const ModelConfig& config, int page_size) {
    return {config.n_layer, config.n_kv_head, config.head_dim(), page_size, config.windows};
  }

  // Every layer, a bit each (bit l: layer l); all ones past 64 layers.
  std::uint64_t all_layers() const {
    return n_layer >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << n_layer) - 1;
  }
  // The layers that queries at position `from` or later still read the keys
  // of block `index` (positions index*page_size ..) in: a windowed layer
  // only while the block's last position is inside the first query's window.
  std::uint64_t layers_reading(int index, int from) const {
    if (windows.empty() || n_layer > 64) return all_layers();
    const long last = static_cast<long>(index + 1) * page_size - 1;
    std::uint64_t layers = 0;
    for (int l = 0; l < n_layer; ++l)
      if (windows[static_cast<std::size_t>(l)] < 0 ||
          last >= static_cast<long>(from) - windows[static_cast<std::size_t>(l)])
        layers |= std::uint64_t{1} << l;
    return layers;
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
