// The shape of one KV block, as the kernels see it (engine/model/kv_layout.h's
// KvLayout holds the same four numbers; kernels/ does not depend on engine/).
//
// Letters as in kernels/attention.h: L = n_layer, Hkv = n_kv_head,
// D = head_dim, P = page_size. A block is L layers one after another; each
// layer is K (Hkv, D, P) then V (Hkv, P, D). So a block is 2 L Hkv "head
// runs" of D P contiguous floats, in (layer, K|V, head) order: run
// r = (layer * 2 + half) * Hkv + head starts at float r * D * P. The int8
// format (kv_quant.h) keeps one scale per run.
#pragma once

#include "kernels/host_device.h"

namespace kvtier::kernels {

struct KvShape {
  int n_layer = 0;
  int n_kv_head = 0;
  int head_dim = 0;
  int page_size = 0;

  // Floats in one head run: D * P.
  KVTIER_HD long floats_per_run() const { return static_cast<long>(head_dim) * page_size; }
  // Head runs in a block: 2 L Hkv (the number of int8 scales).
  KVTIER_HD long runs_per_block() const { return 2L * n_layer * n_kv_head; }
  // Floats in a block's K and V, without the cache-line padding the engine's
  // KvLayout::block_bytes() adds at the end.
  KVTIER_HD long floats_per_block() const { return runs_per_block() * floats_per_run(); }
  // Floats from a block's base to layer `layer`'s K, and to its V.
  KVTIER_HD long k_offset(int layer) const { return 2L * layer * n_kv_head * floats_per_run(); }
  KVTIER_HD long v_offset(int layer) const {
    return k_offset(layer) + n_kv_head * floats_per_run();
  }
};

}  // namespace kvtier::kernels
