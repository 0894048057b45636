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

// When a store tier gets a block.
enum class WritePolicy {
  kWriteBack,     // as L2 fills up (and at a clean shutdown)
  kWriteThrough,  // every full block as soon as it enters the cache
  kOff,           // never: the tier is only read (the remote tier of a reader)
};
// L3's write_policy: write_back | write_through.
std::string_view to_string(WritePolicy policy);
std::expected<WritePolicy, std::string> parse_write_policy(std::string_view name);
// The remote tier's remote_write: back | through | off.
std::string_view remote_write_name(WritePolicy policy);
std::expected<WritePolicy, std::string> parse_remote_write(std::string_view name);

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

  // The remote tier (tiers/redis_store.h): a Redis server that daemons on
  // many machines share, below L3. Empty remote = none. Settings it cannot
  // work with (an unparsable address, a server that does not answer, an
  // unreadable password or secret file) leave it out with a warning, as an
  // unusable l3_path leaves out L3.
  std::string remote;  // one server, or cluster seeds (tiers/redis_address.h)
  std::string remote_namespace = "default";
  // through: what this daemon computes is shared at once (the fleet's
  // point); back: only what leaves L2; off: read what others share.
  WritePolicy remote_write = WritePolicy::kWriteThrough;
  KvFormat remote_format = KvFormat::kExact;
  std::chrono::milliseconds remote_timeout{250};  // to connect, and per round
  std::string remote_password_file;               // Redis's AUTH password, in a file
  std::string remote_secret;                      // the fleet's HMAC key file

  // Refuses l2_format int8 over an exact L3 (l3_path set, l3_format exact):
  // L3 would hold lossy blocks at 4x their int8 size. exact/exact,
  // exact/int8 and int8/int8 are accepted, and int8 L2 without L3. The same
  // for the remote tier and remote_format.
  std::expected<void, std::string> validate() const;
};

}  // namespace kvtier
