#include "engine/cache/transfer_plan.h"

#include <algorithm>
#include <vector>

#include "kernels/block_copy.h"
#include "kernels/kv_quant.h"

namespace kvtier {

namespace {

using Transfer = TransferPlan::Transfer;

void encode(std::byte* dst, const std::byte* src, const kernels::KvShape& shape) {
  kernels::quantize_block(reinterpret_cast<const float*>(src), shape, dst);
}

void decode(std::byte* dst, const std::byte* src, const kernels::KvShape& shape) {
  kernels::dequantize_block(src, shape, reinterpret_cast<float*>(dst));
}

// The calling thread's host buffer of at least n bytes (float-aligned), for
// a block on its way between device memory and the int8 codec.
std::byte* host_block(std::size_t n) {
  thread_local std::vector<float> buffer;
  buffer.resize(std::max(buffer.size(), (n + sizeof(float) - 1) / sizeof(float)));
  return reinterpret_cast<std::byte*>(buffer.data());
}

// A copy of n bytes between L1 and host memory.
Transfer exact_copy(tiers::BlockPool& l1, std::size_t n) {
  if (l1.host_addressable())
    return [n](std::byte* dst, const std::byte* src) { kernels::copy_block(dst, src, n); };
  return [l1 = &l1, n](std::byte* dst, const std::byte* src) { l1->copy(dst, src, n); };
}

struct Codec {
  Transfer encode, decode;
};

// The int8 codec for whichever tier stores int8 (see the header).
Codec int8_codec(const kernels::KvShape& shape, std::size_t block_bytes, tiers::BlockPool& l1,
                 const DeviceKvCodec& device) {
  if (l1.host_addressable()) {
    return {[shape](std::byte* dst, const std::byte* src) { encode(dst, src, shape); },
            [shape](std::byte* dst, const std::byte* src) { decode(dst, src, shape); }};
  }
  if (device.encode && device.decode) {
    // Decodes land in L1; an encode may also start from an exact L2 slot on
    // its way to an int8 L3, which is host memory: the host encodes that.
    return {[shape, l1 = &l1, on_device = device.encode](std::byte* dst, const std::byte* src) {
              if (l1->contains(src))
                on_device(dst, src);
              else
                encode(dst, src, shape);
            },
            device.decode};
  }
  return {[shape, l1 = &l1, n = block_bytes](std::byte* dst, const std::byte* src) {
            std::byte* host = host_block(n);
            l1->copy(host, src, n);
            encode(dst, host, shape);
          },
          [shape, l1 = &l1, n = block_bytes](std::byte* dst, const std::byte* src) {
            std::byte* host = host_block(n);
            decode(host, src, shape);
            l1->copy(dst, host, n);
          }};
}

// Whether a block is its layers end to end, each a multiple of `alignment`
// bytes: then it can move a layer at a time.
bool layers_tile_block(const KvLayout& layout, std::size_t alignment) {
  const std::size_t layer = layout.layer_bytes();
  return layout.n_layer > 1 && layer % alignment == 0 &&
         layer * static_cast<std::size_t>(layout.n_layer) == layout.block_bytes();
}

}  // namespace

std::size_t TransferPlan::stored_bytes(Tier tier) const {
  switch (tier) {
    case Tier::kL1:
      return block_bytes;
    case Tier::kL2:
      return l2_block_bytes;
    default:
      return store[tier].block_bytes;
  }
}

TransferPlan make_transfer_plan(const KvLayout& layout, tiers::BlockPool& l1,
                                const CacheConfig& config, std::span<const StoreTierSpec> stores,
                                const DeviceKvCodec& device) {
  TransferPlan plan;
  const kernels::KvShape shape = layout.shape();
  plan.block_bytes = layout.block_bytes();
  const std::size_t int8_bytes = kernels::kv_quant_bytes(shape);
  plan.l2_block_bytes = config.l2_format == KvFormat::kInt8 ? int8_bytes : plan.block_bytes;
  const Codec int8 = int8_codec(shape, plan.block_bytes, l1, device);
  if (config.l2_format == KvFormat::kInt8) {
    plan.to_l2 = int8.encode;
    plan.from_l2 = int8.decode;
  } else {
    plan.to_l2 = plan.from_l2 = exact_copy(l1, plan.block_bytes);
    // Promotions a layer at a time, when a copy engine moves them (L1 in
    // device memory) and layers tile the block (copy_block wants whole cache
    // lines). Between two host pools a copy is a core's work: moved by
    // layer, beside the forward it was meant to overlap, it takes a core
    // from that forward instead (tier_bench: an L2 hit's TTFT 45 ms by
    // layer, 36 ms whole, 32 ms from L1).
    if (layers_tile_block(layout, 64)) plan.layer_copy = exact_copy(l1, layout.layer_bytes());
    if (config.load_by_layer && !l1.host_addressable() && plan.layer_copy)
      plan.l2_layers = layout.n_layer;
  }
  for (const StoreTierSpec& spec : stores) {
    TransferPlan::StoreLeg& leg = plan.store[spec.tier];
    leg.block_bytes = spec.format == KvFormat::kInt8 ? int8_bytes : plan.block_bytes;
    if (spec.format == KvFormat::kInt8) {
      leg.encode = int8.encode;
      leg.decode = int8.decode;
    } else if (!l1.host_addressable()) {
      leg.encode = leg.decode = exact_copy(l1, plan.block_bytes);
    }
    // A layer of the block is a piece when it is a whole number of the
    // store's alignment (O_DIRECT: pages) and the block has no padding;
    // staged blocks are decoded or copied whole, so they are read whole.
    if (config.load_by_layer && !leg.staged() && layout.n_layer <= spec.max_parts &&
        layers_tile_block(layout, spec.alignment))
      leg.parts = layout.n_layer;
  }
  return plan;
}

}  // namespace kvtier
