// The prefix cache's settings: which tiers exist, how big they are, how
// blocks reach L3 and in what format each lower tier stores them. A plain
// value; validate() refuses the combinations the cache cannot honour.
#pragma once

#include <chrono>
#include <cstddef>
#include <expected>
#include <string>
#include <string_view>

namespace kvtier {

enum class WritePolicy {
  kWriteBack,     // L3 gets blocks as L2 fills up
  kWriteThrough,  // every full block is also written to L3 when it enters the cache
};
std::string_view to_string(WritePolicy policy);
std::expected<WritePolicy, std::string> parse_write_policy(std::string_view name);

// How a lower tier stores a block. int8 (kernels/kv_quant.h, one scale per
// layer, K|V and head) takes about a quarter of the fp32 bytes, so the same
// l2_bytes and l3_bytes hold about 4x the blocks, and is lossy: a block that
// passed through an int8 tier is within the kv_quant error bound of the
// computed one, not bit-identical, so the tokens of a request served from it
// may differ from a recomputation. The determinism guarantees (tokens
// independent of tier and preemption) hold only with exact tiers; int8 is a
// capacity-for-accuracy trade the user opts into (as LMCache's KV
// compression is).
enum class KvFormat {
  kExact,  // the fp32 bytes as computed
  kInt8,   // kernels/kv_quant.h's encoding: about a quarter of the bytes
};
std::string_view to_string(KvFormat format);
std::expected<KvFormat, std::string> parse_kv_format(std::string_view name);

struct CacheConfig {
  std::size_t l2_bytes = 0;  // pinned host pool; 0 = no L2
  std::string l3_path;       // directory for the slab file and its index; empty = no L3
  std::size_t l3_bytes = 0;  // slab size
  WritePolicy write_policy = WritePolicy::kWriteBack;
  KvFormat l2_format = KvFormat::kExact;
  KvFormat l3_format = KvFormat::kExact;
  // After an L3 failure, how long before the store is tried again (it
  // doubles while the probes fail, up to 30 s).
  std::chrono::milliseconds l3_backoff{1000};
  // Bring blocks up from L2 and L3 a layer at a time and let a new
  // request's prefill start on the first layers while the rest are on the
  // way (LMCache's layerwise retrieval; see LayerLoad, cache_handles.h). Needs exact
  // blocks, and for L3 layers of whole 4 KiB pages (GPT-2 124M: 96 KiB);
  // otherwise, or when false, a request waits until its whole blocks are in
  // L1. From L2 only into an L1 in device memory, where a copy engine moves
  // them: between host pools a copy is a core's work, and by layer it would
  // take that core from the forward it is meant to overlap.
  bool load_by_layer = true;

  // Refuses l2_format int8 over an exact L3 (l3_path set, l3_format exact):
  // L3 would hold lossy blocks at 4x their int8 size. exact/exact,
  // exact/int8 and int8/int8 are accepted, and int8 L2 without L3.
  std::expected<void, std::string> validate() const;
};

}  // namespace kvtier
