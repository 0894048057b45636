// The tiered prefix cache: which full KV blocks are kept, in which tier, and
// the moves between tiers. The radix tree (radix_cache.h) says what exists;
// this class decides and performs the moves.
//
//   L1  the engine's block pool (the scheduler's); a cached block there can be
//       shared by a new request at once;
//   L2  a pinned host pool (tiers::BlockPool, Memory::kPinned, or the host
//       memory a device L1's link offers), optional;
//   L3  the SSD store (tiers::L3Store), optional.
//
// Policy:
//  * Demotion instead of dropping: when L1 must free blocks (make_free_l1),
//    the least recently used cached blocks that no request holds go to L2
//    (a copy; L1 and L2 are both host memory without a GPU); when L2 must free
//    a slot, a block already on L3 (clean) is released first, then a block no
//    swapped request waits for, then any; L3 drops its own least recently
//    used entries.
//  * L3 writes: with write_back a block is written from L2 as soon as it is
//    demoted there, so L2 slots are mostly clean when L2 needs them (a slot
//    whose write is still in flight is waited for rather than dropped); with
//    write_through every block is written from L1 as it enters the cache.
//  * Promotion: acquire_prefix() starts copies of L2 blocks up (on the copy
//    worker, tiers/copy_worker.h, or a device's copy queue) and L3 reads,
//    both into fresh L1 blocks (an int8 L3 reads into a staging buffer,
//    decoded into the L1 block by poll()); the request waits (the engine
//    does not) until they complete, and then shares the blocks.
//  * Cleaning: when L1 runs low on free blocks, poll() copies the next few
//    demotion candidates to L2 in the background, so that demoting them
//    later is a release, not a copy on the engine thread. It uses only free
//    L2 slots or ones whose block L3 also has, so it never costs a block.
//    (A swapped request's partial block is still copied at once, one block.)
//  * Pins keep a block in L1 or L2; holds (swapped-out requests) make a block
//    the last choice for dropping.
//  * Formats (l2_format, l3_format): an int8 tier stores blocks quantised
//    (kernels/kv_quant.h, one scale per layer, K|V and head): a block is
//    encoded on its way down into an int8 tier (demotion, cleaning, a stash,
//    an L3 write from L1 or an exact L2) and decoded on its way up into L1
//    (promotion, unstash, an L3 read), about a quarter of the fp32 bytes, so
//    the same l2_bytes and l3_bytes hold about 4x the blocks. Between two
//    int8 tiers the encoded bytes move as they are. An int8 tier is lossy:
//    a block that passed through one is within the kv_quant error bound of
//    the computed one, not bit-identical, so the tokens of a request served
//    from it may differ from a recomputation. The determinism guarantees
//    (tokens independent of tier and preemption) hold only with exact tiers;
//    int8 is a capacity-for-accuracy trade the user opts into (as LMCache's
//    KV compression is). exact (the default) stores the bytes unchanged.
//
// L1 in device memory (a pool whose blocks the host cannot address, such as
// tiers::cuda_device_region's): L3 reads, and writes from L1, go through host
// staging buffers, and the int8 codec runs on the device when create() is
// given one (DeviceKvCodec), else on the host, which reads and writes such a
// block through a host buffer of the calling thread's. When the pool offers a
// DeviceLink (tiers/block_pool.h), L2 lies in the host memory it offers
// (page-locked by the device's driver), and exact L1<->L2 moves in the
// background run on its copy queue (a CUDA stream; tiers/copy_queue.h),
// whose completions come through poll() like the worker's. Should the queue
// fail (a lost device), its moves in flight are thrown away as if never made:
// a promoted block leaves L1 (a pass computed on it by layer is thrown away
// by settle()), a cleaned one stays there; the copy worker takes over. Moves
// on the engine thread (demotions, stashes) are the pool's own copies.
//
// Reference counting in L1: the cache holds one pool reference per node in
// L1 and one per block being written to L3 from L1; requests hold theirs. So
// a node is demotable exactly when the pool's count is 1.
//
// Not thread-safe: the engine thread calls everything; L2 copy and L3
// completions arrive through poll().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/cost_model.h"
#include "engine/kv_layout.h"
#include "engine/radix_cache.h"
#include "kernels/kv_shape.h"
#include "tiers/block_pool.h"
#include "tiers/copy_worker.h"
#include "tiers/latency_stats.h"

namespace kvtier {

enum class WritePolicy {
  kWriteBack,     // L3 gets blocks as L2 fills up
  kWriteThrough,  // every full block is also written to L3 when it enters the cache
};
std::string_view to_string(WritePolicy policy);
std::expected<WritePolicy, std::string> parse_write_policy(std::string_view name);

// How a lower tier stores a block (see the header comment: int8 is lossy).
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
  // way (LMCache's layerwise retrieval; see KvCache::LayerLoad). Needs exact
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

// The int8 codec run by the device that holds an L1 in device memory
// (engine/cuda/cuda_kv_codec.h): encode writes the encoding of an L1 block
// into host memory, decode an L1 block from the encoded host bytes, each done
// when it returns, with the host codec's bytes. Only the int8 bytes then
// cross the bus. Thread-safe: the copy worker and the engine call it. Without
// one, int8 tiers under a device L1 encode and decode on the host, the fp32
// block passing through a host buffer.
struct DeviceKvCodec {
  std::function<void(std::byte* host_dst, const std::byte* l1_src)> encode;
  std::function<void(std::byte* l1_dst, const std::byte* host_src)> decode;
};

struct TierStats {
  std::size_t capacity_blocks = 0;
  std::size_t used_blocks = 0;
  long hits = 0;       // blocks handed to requests from here (L1: shared at once; L2, L3: promoted)
  long demotions = 0;  // blocks moved into this tier from above
  long promotions = 0;  // blocks moved up out of this tier
  long bytes_in = 0;
  long bytes_out = 0;
  long dropped = 0;  // blocks that left the cache from this tier
  long checksum_failures = 0;
  long io_errors = 0;
  bool available = true;
  tiers::LatencySummary transfer;      // demotions and promotions into or out of this tier
  KvFormat format = KvFormat::kExact;  // how this tier stores a block (L1: always exact)
  std::size_t block_bytes = 0;         // bytes a stored block takes here (before slot rounding)
};

struct CacheStats {
  TierStats tier[kNumTiers];
  // Once per admission that took its prefix (a request waiting for blocks
  // to come up looks again each step, and is counted when it has them).
  long lookups = 0;
  long missed_blocks = 0;  // full prompt blocks no tier had
  long recompute_tokens_avoided = 0;
  long skipped_loads = 0;  // blocks recomputed because that was cheaper than loading
  long cleaned = 0;        // L1 blocks copied to L2 in the background, before their demotion
  std::size_t nodes = 0;
  TierCosts costs;
};

// The shape of the radix tree, for cache.tree.
struct TreeSummary {
  struct Family {           // the blocks under one first block
    std::string first_key;  // hex
    std::vector<int> first_tokens;
    int blocks[kNumTiers] = {0, 0, 0};
    int nodes = 0;
    int depth = 0;  // longest prefix in it, in blocks
  };
  std::size_t nodes = 0;
  std::size_t blocks[kNumTiers] = {0, 0, 0};  // nodes with a copy in each tier
  std::size_t leaves = 0;
  int max_depth = 0;
  std::size_t pinned = 0, held = 0, in_flight = 0;
  std::vector<Family> largest;  // up to `top` families, most nodes first
};

// Where the cached prefix of a token sequence is.
struct PrefixLookup {
  int blocks[kNumTiers] = {0, 0, 0};  // by best tier, in prefix order
  int total_blocks() const { return blocks[0] + blocks[1] + blocks[2]; }
};

class KvCache {
 public:
  // `l1` is the engine's pool (shared with the scheduler, outliving the
  // cache). Blocks must be a multiple of 4096 bytes when L3 is used (O_DIRECT
  // straight from and into L1). Fails with a message for a pool whose blocks
  // are too small for the layout and for formats config.validate() refuses;
  // an L3 that cannot be opened is not an error: the cache runs on L1 + L2,
  // warnings() says why and the L3 tier reports available = false. With
  // l3_format int8 the store's tag includes the format, so a store written
  // exact (or the other way round) starts empty, with a warning. `codec`
  // serves int8 tiers when l1 is device memory (see DeviceKvCodec).
  static std::expected<std::unique_ptr<KvCache>, std::string> create(
      const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
      const CacheConfig& config, const DeviceKvCodec& codec = {});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // The chain root for requests with this salt.
  tiers::BlockKey root(std::string_view cache_salt) const;

  // Which tiers hold the first full blocks of tokens (at most max_blocks).
  // Looks in the L3 index too, so it sees blocks from before a restart.
  PrefixLookup lookup(const tiers::BlockKey& root, std::span<const int> tokens, int max_blocks);

  // Moves still landing, a layer at a time, in L1 blocks a request already
  // holds: L3 reads and L2 copies of the blocks of its prefix whose bytes
  // are on the way. The request may compute on layer l of them once
  // await_layer(l) returns. An L3 block is verified only when the whole of
  // it is in, so nothing computed from the load may be used before settle()
  // says it was right. Checksums stay per block: what a corrupt block
  // touched is thrown away, never sent.
  struct LayerLoad {
    std::vector<tiers::BlockKey> keys;  // every block on its way up
    std::vector<int> blocks;            // and their L1 ids
    std::vector<std::uint64_t> reads;   // L3 tickets, a read each
    // L2 promotions, a copy per layer: copies[i][l] is one block's layer l.
    std::vector<std::vector<std::uint64_t>> copies;
    // What acquire_prefix counted for the run (its lookup, hits, misses,
    // skipped loads and recompute_tokens_avoided); a failed settle() takes
    // it back (the request looks again, and counts what it then finds).
    struct Counted {
      long hits[kNumTiers] = {};
      long missed = 0, skipped = 0, tokens = 0;
    } counted;
    bool empty() const { return reads.empty() && copies.empty(); }
  };

  // For admission: makes the cached run of the first full blocks of tokens
  // (at most max_blocks, and cut where recomputing is cheaper than loading)
  // usable in L1, and when it is, takes one pool reference on each block for
  // the caller and returns them in order (possibly none). Returns nullopt
  // while copies or L3 reads for it are in flight: try again after a later
  // poll(). With `load` (and load_by_layer on, see CacheConfig), a run whose
  // only missing blocks are on their way up by layer is returned at once,
  // its blocks referenced like the others, and those moves are listed in
  // *load.
  // Takes at most `l1_blocks_allowed` free L1 blocks for promotions. With
  // `served`, says how many of the returned blocks came from each tier (what
  // the cache counts as each tier's hits).
  std::optional<std::vector<int>> acquire_prefix(const tiers::BlockKey& root,
                                                 std::span<const int> tokens, int max_blocks,
                                                 int l1_blocks_allowed, LayerLoad* load = nullptr,
                                                 PrefixLookup* served = nullptr);
  // Returns once layer `layer` of every block of `load` is in L1
  // (unverified; see LayerLoad).
  void await_layer(const LayerLoad& load, int layer);
  // Waits for the reads of `load` to complete and handles them: true when
  // every block arrived intact. False: a block failed (its checksum, the
  // read, or the copy) and is gone from L1, and whatever was computed from
  // the load must be thrown away. Either way the load is over; the caller still
  // holds its references on the blocks.
  bool settle(const LayerLoad& load);

  // Adds the full blocks of a sequence to the cache: blocks[i] holds tokens
  // [i*P, (i+1)*P). Blocks already cached (same key) are left as they are;
  // new ones take a pool reference. Returns the nodes in order (for holds).
  std::vector<CacheNode*> insert(const tiers::BlockKey& root, std::span<const int> tokens,
                                 std::span<const int> blocks);

  // Frees L1 blocks by demoting unheld cached ones until the pool has n free;
  // false if it cannot.
  bool make_free_l1(int n);
  // L1 blocks the cache could free right now (cached, held by no request).
  int demotable_l1() const;

  // A swapped-out request's last partial block: copied (encoded, with an
  // int8 L2) into an L2 slot the request owns. nullopt without L2 or when no
  // slot can be freed.
  std::optional<int> stash_partial(int l1_block);
  // Copies (decodes) a stashed block back into a fresh L1 block (the
  // caller's reference) and frees the slot unless keep_slot; nullopt if L1
  // has no free block.
  std::optional<int> unstash_partial(int l2_slot, bool keep_slot = false);
  void drop_stash(int l2_slot);

  // Holds and pins by key (nodes may move or go; keys stay valid).
  void hold(std::span<const tiers::BlockKey> keys, int delta);
  // Pins the cached prefix of tokens (delta +1) or unpins it (-1); returns
  // how many blocks it changed.
  int pin(const tiers::BlockKey& root, std::span<const int> tokens, int delta);

  // Empties a tier of every unheld, unpinned block. What the tier below can
  // keep goes there first, whatever the write policy: L1's blocks to L2 (as
  // make_free_l1 would demote them), or to L3 without an L2; L2's blocks to
  // L3 (waiting for the writes). Only what no lower tier can take, and all
  // of L3, is dropped. Returns the blocks that left the tier.
  int flush(Tier tier);

  // Handles L2 copy and L3 completions, then starts cleaning and
  // background writeback. Call once per engine step.
  void poll();
  // Waits for every L2 copy and L3 operation in flight (shutdown, tests).
  void drain();
  // For an engine with nothing to compute but requests waiting for blocks:
  // runs the queued L1<->L2 copies itself, beside the copy worker, and when
  // none is queued but a transfer is in flight, sleeps until one completes
  // (or timeout).
  void wait(std::chrono::milliseconds timeout);
  // L2 copies and L3 operations in flight.
  std::size_t transfers_in_flight() const;
  // Writes every cached block L3 lacks (from L2, or straight from L1), waits
  // and syncs L3 (L3Store::sync): after it, a restart on the same l3_path,
  // even after a power loss, finds everything this cache held. The
  // destructor calls it, so a clean shutdown loses nothing (write_back
  // included). Returns the blocks written.
  int persist();

  // Measures what a block costs to bring up from L2 (a copy, or a decode
  // from an int8 L2) and to read from L3 (one read, then several at once:
  // the fixed latency and the per-block part; an int8 L3's decode included),
  // several times each, and adds every measurement to the cost model.
  // Returns the cost model's figures then (prefill is not measured here:
  // the scheduler adds its passes). Call at start-up while L1 has free blocks; takes a few
  // milliseconds, after waiting for whatever is in flight (drain()).
  TierCosts calibrate();
  // The load-or-recompute figures (engine/cost_model.h): the scheduler adds
  // its passes' prefill costs; tests and benches may pin them.
  CostModel& cost_model() { return costs_; }
  CacheStats stats() const;
  const RadixCache& tree() const { return tree_; }
  TreeSummary summarize(int top = 8) const;
  std::vector<std::string> warnings() const { return warnings_; }
  // References the cache itself holds on each L1 block (for the scheduler's
  // invariant check): 1 for a cached node's block, plus writes in flight.
  std::vector<int> l1_ref_counts() const;
  // An error message if a node's locations disagree with the pools.
  std::expected<void, std::string> check_invariants() const;

 private:
  KvCache(const KvLayout& layout, std::uint64_t fingerprint, tiers::BlockPool& l1,
          const CacheConfig& config, const DeviceKvCodec& codec);
  std::optional<int> alloc_l1();
  // Which L2 blocks alloc_l2 may push out when no slot is free.
  enum class L2Victims {
    kOnL3,      // only blocks L3 also has (cleaning must not cost a block)
    kWithCopy,  // blocks another tier (L1 or L3) also has
    kAny,       // any unpinned block, the least costly first
  };
  // A free L2 slot, freeing one as `victims` allows when none is.
  std::optional<int> alloc_l2(L2Victims victims);
  void demote_l1(CacheNode* node);
  // Starts background copies of the next L1 demotion candidates to L2.
  void start_cleaning();
  void finish_move(std::uint64_t ticket, std::chrono::nanoseconds latency);
  // Handles the completions that have arrived and starts nothing: safe in
  // the middle of a move (alloc_l2 inside demote_l1), where poll() could
  // start cleaning the very block being demoted.
  void collect();
  void poll_l3();
  // Sleeps until a copy or L3 completion (or an L3 piece) is signalled, or
  // the timeout passes.
  void sleep_for_signal(std::chrono::milliseconds timeout);
  // Adds (sign +1) or takes back (-1) what acquire_prefix counted for a run.
  void count(const LayerLoad::Counted& counted, int sign);
  // Whether a block is its layers end to end, each a multiple of
  // `alignment` bytes: then it can move a layer at a time.
  bool layers_tile_block(std::size_t alignment) const;
  void account_copy(Tier from, Tier to, std::chrono::nanoseconds took);
  // Starts L3 writes of the L2 blocks L3 lacks (write_back).
  void start_writeback();
  // Writes every cached block L3 lacks and `wanted` picks to L3 (from its
  // L2 slot, else its L1 block) and waits for them, when L3 accepts writes
  // (flush, persist). Returns the writes.
  int write_down_to_l3(const std::function<bool(const CacheNode&)>& wanted);
  // Starts the L3 write of a node from its L2 slot, or from its L1 block
  // (holding a pool reference until the write completes). Bytes other than
  // an L2 slot in L3's format go through a staging buffer first (encoded, or
  // copied off the device). False, starting nothing, once device_failed().
  bool write_to_l3(CacheNode* node);
  // Whether the device that holds L1 has failed (DeviceLink::failure; said
  // once, in warnings() and L1's io_errors). What came off it since is
  // garbage that an L3 checksum would vouch for, and a restart on a working
  // device would serve: L3 takes no more writes. Bytes that left the device
  // before the failure are sound, and a failure is seen by the first write
  // after it, so checking before each write is enough.
  bool device_failed();
  // True if demoting this L1 node would not lose a pinned block.
  bool can_demote(const CacheNode& node) const;
  // An L1<->L2 move of `bytes` in the background, as moves_'s ticket: on the
  // device's copy queue (a plain copy) when there is one, on the copy worker
  // as `how` otherwise. Between the queue's loss and collect(), a move is
  // not made at all: collect() fails it with the queue's others.
  std::uint64_t start_move(std::byte* dst, const std::byte* src, std::size_t bytes,
                           const tiers::CopyWorker::Transfer& how);
  // The background moves completed since the last call, from both engines.
  std::vector<tiers::CopyCompletion> poll_moves();
  // The copy queue failed: stop using it; collect() fails its moves.
  void lose_queue(const std::string& why);
  // Throws away the moves the lost queue had in flight (see the top).
  void fail_queue_moves();
  // An L1<->L2 move on the engine thread (to_l2_ or from_l2_), timed.
  void move_block(std::byte* dst, const std::byte* src, const tiers::CopyWorker::Transfer& how,
                  Tier from, Tier to);
  // Bytes a block takes in a tier: the layout's, or the int8 encoding's.
  std::size_t stored_bytes(Tier tier) const;

  struct L3Parts;  // the store and what is in flight; null without L3
  struct Move {    // an L1<->L2 copy in flight
    tiers::BlockKey key;
    bool up = false;  // L2 -> L1 (a promotion), else L1 -> L2 (cleaning)
    int l1_block = -1;
    int l2_slot = -1;
    bool by_layer = false;  // one layer of a promotion (see copies_by_layer_)
  };
  struct Wake;  // what wait() sleeps on; completion threads signal it
  KvLayout layout_;
  kernels::KvShape shape_;      // the same numbers, for kernels/kv_quant.h
  std::size_t block_bytes_;     // KvLayout::block_bytes(): a multiple of 64, as copy_block needs
  std::size_t l2_block_bytes_;  // what an L2 slot holds: block_bytes_, or the encoded size
  std::size_t l3_block_bytes_;  // the same for an L3 entry
  std::uint64_t fingerprint_;
  tiers::BlockPool* l1_;
  std::unique_ptr<tiers::BlockPool> l2_;
  std::unique_ptr<L3Parts> l3_;
  CacheConfig config_;
  RadixCache tree_;
  CostModel costs_;
  CacheStats stats_;
  tiers::LatencyStats latency_[kNumTiers];
  // Per L1 block: references held by reads of it in flight (L3 writes from
  // L1, cleaning copies to L2).
  std::vector<int> l1_io_refs_;
  std::shared_ptr<Wake> wake_;  // shared with the completion callbacks
  std::unordered_map<std::uint64_t, Move> moves_;
  // Promotions copied a layer at a time (load_by_layer with an exact L2 and
  // a device L1):
  // each block's copies in layer order, until the last has been handled.
  int l2_layers_ = 1;  // copies a promotion takes: n_layer, or 1
  tiers::CopyWorker::Transfer layer_copy_;
  struct LayeredMove {
    std::vector<std::uint64_t> tickets;
    int left = 0;
  };
  std::unordered_map<tiers::BlockKey, LayeredMove, tiers::BlockKeyHash> copies_by_layer_;
  // Completions await_layer() took from the copy worker mid-pass; collect()
  // handles them (the tree is not touched during a forward pass).
  std::vector<tiers::CopyCompletion> early_;
  std::unordered_set<std::uint64_t> early_tickets_;
  int clean_window_ = 0;  // how many free or clean L1 blocks cleaning aims for
  // The two directions of an L1<->L2 move: plain copies with an exact L2,
  // the int8 encode and decode with an int8 one. Run on the copy worker
  // (promotions, cleaning) or here (demote_l1, stashes); they outlive the
  // worker's jobs (the worker is destroyed first).
  tiers::CopyWorker::Transfer to_l2_, from_l2_;
  // Into an L3 staging buffer from L1 or L2, and out of one into L1: the
  // int8 codec with an int8 L3, CUDA copies with L1 in device memory; empty
  // otherwise (L3 I/O goes straight to and from L1, no staging).
  tiers::CopyWorker::Transfer l3_encode_, l3_decode_;
  // Nodes stamped with this time were matched by the acquire_prefix() in
  // progress: demoting one to make room for another would thrash.
  std::optional<std::uint64_t> protected_stamp_;
  std::vector<std::string> warnings_;
  // Last: destroyed (joined, waited for) first, while everything their jobs
  // touch exists. The device's copy queue moves exact blocks when L1 offers
  // one; the copy worker moves the rest, and is made at its first move.
  std::unique_ptr<tiers::CopyQueue> queue_;
  bool queue_lost_ = false;         // its moves are still in moves_, for collect() to fail
  std::uint64_t never_copied_ = 0;  // moves started meanwhile (see start_move)
  bool device_failed_ = false;
  std::unique_ptr<tiers::CopyWorker> copier_;
};

}  // namespace kvtier
